"""The one encoder protocol every model, head and adapter implements.

    encoder.encode(texts, kind="document" | "query") -> float32 (n, dim), rows L2-normalised
    encoder.dim  -> int
    encoder.id   -> str, stable; names model + head + adapter, and goes into the network
                    profile so nodes can tell whether two vectors live in the same space

and what some encoders offer besides, each its own protocol (`isinstance` says whether one does):

    Split:      encoder.cache_parts() -> (base, map)   a frozen base plus a cheap map (a Zen head,
                                                       an adapter): only the base's vectors are cached
    Configured: encoder.config() -> dict               rebuilt by name (`backbones.backbone_from_config`)
    OverBackbone: encoder.backbone -> Encoder          a head over a sentence encoder: the backbone
                                                       scores a text search's second stage (`rescore`)
    `dsonet.codec.profile.ShipsBaseline`: encoder.baseline   the space's fixed BitDelta baseline
"""

from __future__ import annotations

from typing import Callable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from dsonet.errors import DsoError

Kind = Literal["document", "query"]
KINDS = ("document", "query")


class EncoderError(DsoError, ValueError):
    """An encoder that cannot be loaded, or bad input to one."""


@runtime_checkable
class Encoder(Protocol):
    @property
    def dim(self) -> int: ...

    @property
    def id(self) -> str: ...

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray: ...


@runtime_checkable
class Split(Protocol):
    def cache_parts(self) -> tuple[Encoder, Callable[[np.ndarray], np.ndarray]]: ...


@runtime_checkable
class Configured(Protocol):
    def config(self) -> dict: ...


@runtime_checkable
class OverBackbone(Protocol):
    backbone: Encoder


def check_texts(texts: Sequence[str], kind: str) -> list[str]:
    if kind not in KINDS:
        raise EncoderError(f"kind must be one of {KINDS}, got {kind!r}")
    if isinstance(texts, str):
        raise EncoderError("texts must be a list of strings, not one string; wrap it: encode([text])")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise EncoderError(f"texts[{bad[0]}] is a {type(texts[bad[0]]).__name__}, not a string")
    return texts


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)
