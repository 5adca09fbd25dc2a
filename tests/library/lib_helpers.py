"""Shared builders for the library tests."""

import hashlib

import numpy as np

from dsonet.experience import Experience, Provenance
from dsonet.library.index import code_index, stages as index_stages

DIM = 384


class HashEncoder:
    """Deterministic stand-in for tests whose subject is storage or merge, not embeddings."""

    dim = DIM
    id = "test:hash"

    def encode(self, texts, kind="document"):
        out = np.stack([np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).standard_normal(DIM) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def experiences(n, domain="general", seed=0, prefix="When case"):
    rng = np.random.default_rng(seed)
    return [Experience(f"{prefix} {seed}-{i}, do step {i}", domain, float(rng.uniform(0.3, 0.9)),
                       Provenance("n1", "m", 1, 0)) for i in range(n)]


def unit(n, seed=0, dim=DIM):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32) + 0.2
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def small_index_thresholds(monkeypatch):
    """Both index stages due at a few hundred rows of 96 dims (the real thresholds need 16k rows, 1024 dims)."""
    monkeypatch.setattr(code_index, "SKETCH_MIN_ROWS", 1024)
    monkeypatch.setattr(code_index, "SUBSPACE_MIN_ROWS", 512)
    monkeypatch.setattr(code_index, "SUBSPACE_MIN_DIM", 64)
    monkeypatch.setattr(index_stages, "SUBSPACE_DIM", 8)
    monkeypatch.setattr(index_stages, "SKETCH_DIM", 8)


def subspace_vectors(n: int, seed: int) -> np.ndarray:
    """Unit vectors in 8 directions of 96 coordinates: the subspace stage holds their signal."""
    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((96, 8)))[0].T.astype(np.float32)
    x = unit(n, seed, dim=8) @ lift
    return x / np.linalg.norm(x, axis=1, keepdims=True)
