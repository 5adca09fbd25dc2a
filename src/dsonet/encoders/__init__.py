"""Encoders: text -> L2-normalised float32 vectors, behind one protocol (see base.py)."""

from dsonet.encoders.base import Encoder, EncoderError, Kind
from dsonet.encoders.sentence import SentenceTransformerEncoder, minilm

__all__ = ["Encoder", "EncoderError", "Kind", "SentenceTransformerEncoder", "minilm"]
