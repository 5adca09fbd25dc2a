"""Signed batches built with the real codec for the aggregate tests."""

import numpy as np
import pytest

from dsonet.codec.batch import default_profile, make_batch
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity

NOW = 1_750_000_000_000
DIM = 64


def _cloud(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Unit vectors scattered around one shared direction (an honest domain)."""
    x = 1.0 + np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def cloud():
    return _cloud


# the test space's fixed baseline, as a shipped encoder's would be: the mean of its outputs
PROFILE = default_profile(DIM, "test-encoder", _cloud(4096, seed=123).mean(axis=0))


@pytest.fixture
def profile():
    return PROFILE


@pytest.fixture
def batch_of(profile):
    def make(node: str, vectors: np.ndarray, texts=None, ts: int = NOW, confidence: float = 0.6, domain="math.test"):
        ident = NodeIdentity.from_seed(node.encode())
        texts = texts or [f"When case {node} {i} appears, apply step {i}." for i in range(len(vectors))]
        exps = [Experience(t, domain, confidence, Provenance(ident.node_id, "m", ts, 0)) for t in texts]
        return make_batch(exps, vectors, profile, ident, timestamp_ms=ts)

    return make
