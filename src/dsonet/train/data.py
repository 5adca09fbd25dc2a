"""Training data: the frozen backbone's embeddings of packaged GSM8K text, computed once.

GSM8K questions are queries and their own solutions the relevant documents; `dsonet.data.split`
holds out a fixed share of the items for every metric. Stages 1 and 3 train on the texts of
the training items (questions and solutions alike); stage 3's code loss also ranks the
sentences of those items, the short texts a library mostly holds. The backbone is frozen, so
its embeddings are computed once (and cached by `cached_encode`); only the head trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsonet.data import gsm8k, sentences, split
from dsonet.encoders.cache import cached_encode
from dsonet.encoders.registry import load_encoder
from dsonet.train.config import TrainConfig


@dataclass(frozen=True)
class TrainData:
    q_train: np.ndarray  # (Nt, d_in) questions of the training items, encoded as queries
    d_train: np.ndarray  # (Nt, d_in) their solutions, encoded as documents
    q_held: np.ndarray  # (Nh, d_in) held-out questions
    d_held: np.ndarray  # (Nh, d_in) held-out solutions
    s_train: np.ndarray  # (Ns, d_in) the sentences of the training items' questions and solutions

    @property
    def d_in(self) -> int:
        return int(self.q_train.shape[1])

    @property
    def corpus_train(self) -> np.ndarray:
        return np.concatenate([self.q_train, self.d_train])  # (2 Nt, d_in)

    @property
    def corpus_held(self) -> np.ndarray:
        return np.concatenate([self.q_held, self.d_held])  # (2 Nh, d_in)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **{k: getattr(self, k) for k in KEYS})
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "TrainData":
        with np.load(path) as f:
            missing = [k for k in KEYS if k not in f]
            if missing:
                raise ValueError(f"{path} lacks {missing} (written by an older dsonet); delete it and it is rebuilt")
            return cls(*(f[k].astype(np.float32) for k in KEYS))


KEYS = ("q_train", "d_train", "q_held", "d_held", "s_train")


def split_indices(n: int, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    train, held = split(list(range(n)), held_out=held_out, seed=seed)
    return np.array(train), np.array(held)


def build_data(config: TrainConfig, encoder=None) -> TrainData:
    """Encode GSM8K with the backbone (``encoder`` or the one ``config.backbone`` names)."""
    items = gsm8k()[: config.limit_items or None]
    encoder = encoder or load_encoder(config.backbone)
    q = cached_encode(encoder, [i.question for i in items], "query")  # (N, d_in)
    d = cached_encode(encoder, [i.solution for i in items], "document")  # (N, d_in)
    train, held = split_indices(len(items), config.held_out, config.seed)
    texts = dict.fromkeys(s for i in train for s in items[i].steps + sentences(items[i].question))  # ordered, distinct
    s_train = cached_encode(encoder, list(texts), "document")  # (Ns, d_in)
    return TrainData(q[train], d[train], q[held], d[held], s_train)


@dataclass(frozen=True)
class GaussianFit:
    """Synthetic backbone embeddings: Gaussian draws with real embeddings' mean and covariance,
    L2-normalised as the backbone's own are. Used where real text runs out (stage 3's code loss
    and `dso bench retrieval` past the packaged corpus)."""

    mean: np.ndarray  # (d_in,)
    chol: np.ndarray  # (d_in, d_in) lower Cholesky factor of the covariance

    @classmethod
    def of(cls, real: np.ndarray) -> "GaussianFit":
        real = np.asarray(real, dtype=np.float64)
        cov = np.cov(real, rowvar=False) + 1e-8 * np.eye(real.shape[1])
        return cls(real.mean(0), np.linalg.cholesky(cov))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        z = rng.standard_normal((n, len(self.mean))) @ self.chol.T + self.mean  # (n, d_in)
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)
