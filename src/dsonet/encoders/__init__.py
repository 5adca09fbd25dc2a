"""Encoders: text -> L2-normalised float32 vectors, behind one protocol (see base.py)."""

from dsonet.encoders.base import Encoder, EncoderError, Kind
from dsonet.encoders.cache import cached_encode
from dsonet.encoders.default import default_zen
from dsonet.encoders.sentence import SentenceTransformerEncoder, minilm

__all__ = ["Encoder", "EncoderError", "Kind", "SentenceTransformerEncoder", "cached_encode", "default_encoder", "minilm"]


def default_encoder() -> Encoder:
    """The network's embedded default encoder, the default profile's space: MiniLM + the Zen head
    that ships in the package -> 7680 dims (`dsonet.encoders.default`), computed in numpy (no
    torch; ``DSONET_ENCODER_BACKEND=torch`` for the torch path); ``.baseline`` is the profile's
    fixed BitDelta baseline."""
    return default_zen()
