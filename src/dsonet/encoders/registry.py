"""Encoders by name: a spec string for the command line, a config dict for files.

Spec strings (``dso align --model M``, ``dso train --backbone B``)::

    minilm | default | wordllama | st:NAME_OR_PATH | hf:NAME_OR_PATH[?pooling=last] | zen:DIR_OR_HUB_ID

Config dicts are what an encoder's ``config()`` returns and what a saved Zen-Reranker or
adapter stores to name its backbone, so a directory on disk rebuilds the whole encoder.
"""

from __future__ import annotations

from dsonet.encoders.base import Encoder, EncoderError

SPEC_HELP = "minilm, default, wordllama, st:NAME, hf:NAME or zen:DIR"


def encoder_config(encoder: Encoder) -> dict:
    config = getattr(encoder, "config", None)
    if config is None:
        raise EncoderError(f"encoder {encoder.id!r} ({type(encoder).__name__}) has no config(); it cannot be saved by name")
    return config()


def encoder_from_config(config: dict, device: str | None = None) -> Encoder:
    """Rebuild an encoder from its ``config()`` dict."""
    kind = config.get("type")
    if kind == "sentence-transformers":
        from dsonet.encoders.sentence import SentenceTransformerEncoder, minilm

        if config["name_or_path"] in ("minilm", "all-MiniLM-L6-v2") and device is None and not config.get("query_prefix"):
            return minilm()
        return SentenceTransformerEncoder(config["name_or_path"], device=device, query_prefix=config.get("query_prefix", ""))
    if kind == "hf":
        from dsonet.encoders.hf import HFEncoder

        return HFEncoder(config["name_or_path"], pooling=config.get("pooling", "mean"),
                         query_instruction=config.get("query_instruction", ""), device=device)
    if kind == "wordllama":
        from dsonet.encoders.wordllama import WordLlamaEncoder

        return WordLlamaEncoder(dim=config.get("dim", 256))
    if kind == "zen":
        from dsonet.encoders.zen import ZenReranker

        return ZenReranker.from_pretrained(config["path"], device=device)
    raise EncoderError(f"encoder config type {kind!r} is unknown; expected sentence-transformers, hf, wordllama or zen")


def spec_config(spec: str, **options) -> dict:
    """The config dict a spec string names, without loading anything (see module docstring)."""
    if spec in ("minilm", "st:minilm"):
        return {"type": "sentence-transformers", "name_or_path": "minilm"}
    if spec == "wordllama":
        return {"type": "wordllama"}
    prefix, _, name = spec.partition(":")
    if name and prefix == "st":
        return {"type": "sentence-transformers", "name_or_path": name}
    if name and prefix == "hf":
        from urllib.parse import parse_qsl

        name, _, query = name.partition("?")  # hf:NAME?pooling=last&query_instruction=...
        return {"type": "hf", "name_or_path": name, **dict(parse_qsl(query)), **options}
    if name and prefix == "zen":
        return {"type": "zen", "path": name}
    raise EncoderError(f"encoder spec {spec!r} is not understood; use one of: {SPEC_HELP}")


def load_encoder(spec: str, device: str | None = None, **options) -> Encoder:
    """An encoder from a spec string (see module docstring); ``options`` go to the HF encoder."""
    if spec == "default":
        from dsonet.encoders import default_encoder

        return default_encoder()
    return encoder_from_config(spec_config(spec, **options), device)
