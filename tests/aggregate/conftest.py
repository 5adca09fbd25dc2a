"""Signed batches built with the real codec for the aggregate tests."""

import numpy as np
import pytest

from dsonet.codec import make_batch
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity

from agg_helpers import NOW, PROFILE, _cloud


@pytest.fixture
def cloud():
    return _cloud


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
