"""Encoders: text -> L2-normalised float32 vectors, behind one protocol (see base.py)."""

from dsonet.encoders.base import Encoder, EncoderError, Kind
from dsonet.encoders.sentence import SentenceTransformerEncoder, minilm

__all__ = ["Encoder", "EncoderError", "Kind", "SentenceTransformerEncoder", "default_encoder", "minilm"]


def default_encoder() -> Encoder:
    """The network's embedded default encoder (the default profile's space)."""
    return minilm()
