"""WordLlama (256 dims): a different model family (token-embedding pooling, no transformer),
used as the "other model" in cross-model work. Loaded from its package, no download."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from dsonet.encoders.base import EncoderError, Kind, check_texts, l2_normalise


@lru_cache(maxsize=4)
def _load(dim: int):
    import wordllama
    from wordllama import WordLlama

    try:
        return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True, dim=dim)
    except Exception as exc:  # missing weight file for that dim, corrupt package...
        raise EncoderError(f"cannot load WordLlama with dim={dim} from its package: {exc}; dim=256 ships with it") from exc


class WordLlamaEncoder:
    def __init__(self, dim: int = 256, batch_size: int = 256):
        self.model = _load(int(dim))
        self._dim = int(dim)
        self.batch_size = batch_size

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def id(self) -> str:
        return f"wordllama:l2_supercat-{self._dim}"

    def config(self) -> dict:
        return {"type": "wordllama", "dim": self._dim}

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return l2_normalise(self.model.embed(texts, norm=False, batch_size=self.batch_size))
