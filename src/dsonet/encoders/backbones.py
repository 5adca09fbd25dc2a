"""Backbones by config: an encoder as the dict a saved Zen head or adapter keeps to name it, and back.

The kinds here are the ones a head sits on (sentence-transformers, hf, wordllama); their heavy
libraries load when an encoder is built. `dsonet.encoders.registry` adds the Zen-Reranker itself
and spec strings, and hands its own builder to `ZenReranker.from_pretrained` so that a head saved
over any encoder it knows rebuilds.
"""

from __future__ import annotations

from dsonet.encoders.base import Configured, Encoder, EncoderError
from dsonet.encoders.hf import HFEncoder
from dsonet.encoders.sentence import SentenceTransformerEncoder, minilm
from dsonet.encoders.wordllama import WordLlamaEncoder

KINDS = ("sentence-transformers", "hf", "wordllama")


def encoder_config(encoder: Encoder) -> dict:
    if not isinstance(encoder, Configured):
        raise EncoderError(f"encoder {encoder.id!r} ({type(encoder).__name__}) has no config(); it cannot be saved by name")
    return encoder.config()


def backbone_from_config(config: dict, device: str | None = None) -> Encoder:
    """Rebuild a backbone from its ``config()`` dict."""
    kind = config.get("type")
    if kind == "sentence-transformers":
        if config["name_or_path"] in ("minilm", "all-MiniLM-L6-v2") and device is None and not config.get("query_prefix"):
            return minilm()
        return SentenceTransformerEncoder(config["name_or_path"], device=device, query_prefix=config.get("query_prefix", ""))
    if kind == "hf":
        return HFEncoder(config["name_or_path"], pooling=config.get("pooling", "mean"),
                         query_instruction=config.get("query_instruction", ""), device=device)
    if kind == "wordllama":
        return WordLlamaEncoder(dim=config.get("dim", 256))
    raise EncoderError(f"backbone config type {kind!r} is unknown; expected one of {', '.join(KINDS)} (a Zen-Reranker "
                       "as a backbone loads through dsonet.encoders.registry.encoder_from_config)")
