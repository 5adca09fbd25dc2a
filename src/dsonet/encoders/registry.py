"""Encoders by name: a spec string for the command line, a config dict for files.

Spec strings (``dso align --model M``, ``dso train --backbone B``)::

    minilm | default | wordllama | st:NAME_OR_PATH | hf:NAME_OR_PATH[?pooling=last] | zen:DIR_OR_HUB_ID

Config dicts are what an encoder's ``config()`` returns and what a saved Zen-Reranker or
adapter stores to name its backbone, so a directory on disk rebuilds the whole encoder.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from dsonet.encoders import default_encoder
from dsonet.encoders.backbones import KINDS, backbone_from_config
from dsonet.encoders.base import Encoder, EncoderError

SPEC_HELP = "minilm, default, wordllama, st:NAME, hf:NAME or zen:DIR"


def encoder_from_config(config: dict, device: str | None = None) -> Encoder:
    """Rebuild an encoder from its ``config()`` dict: a backbone, or a Zen-Reranker over one."""
    kind = config.get("type")
    if kind == "zen":
        from dsonet.encoders.zen import ZenReranker  # torch

        return ZenReranker.from_pretrained(config["path"], device=device, load_backbone=encoder_from_config)
    if kind not in KINDS:
        raise EncoderError(f"encoder config type {kind!r} is unknown; expected sentence-transformers, hf, wordllama or zen")
    return backbone_from_config(config, device)


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
        name, _, query = name.partition("?")  # hf:NAME?pooling=last&query_instruction=...
        return {"type": "hf", "name_or_path": name, **dict(parse_qsl(query)), **options}
    if name and prefix == "zen":
        return {"type": "zen", "path": name}
    raise EncoderError(f"encoder spec {spec!r} is not understood; use one of: {SPEC_HELP}")


def load_encoder(spec: str, device: str | None = None, **options) -> Encoder:
    """An encoder from a spec string (see module docstring); ``options`` go to the HF encoder."""
    if spec == "default":
        return default_encoder()
    return encoder_from_config(spec_config(spec, **options), device)
