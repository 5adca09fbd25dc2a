"""Shared values for the aggregate tests (a module of its own: every test folder has a conftest)."""

import numpy as np

from dsonet.codec import default_profile

NOW = 1_750_000_000_000
DIM = 64


def _cloud(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Unit vectors scattered around one shared direction (an honest domain)."""
    x = 1.0 + np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# the test space's fixed baseline, as a shipped encoder's would be: the mean of its outputs
PROFILE = default_profile(DIM, "test-encoder", _cloud(4096, seed=123).mean(axis=0))
