"""The top eigenpairs a fit needs, without a full eigendecomposition."""

import numpy as np

from dsonet.library.index.eigen import top_eigh


def test_top_eigh_finds_the_top_eigenpairs_a_full_eigh_finds():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((600, 40)) * (1.0 / np.arange(1, 41))) @ rng.standard_normal((40, 300))
    x = (x + 0.05 * rng.standard_normal((600, 300))).astype(np.float32)
    gram = x @ x.T / len(x)
    vals, vecs = top_eigh(gram, 16)
    full_vals, full_vecs = np.linalg.eigh(gram.astype(np.float64))
    order = np.argsort(full_vals)[::-1][:16]
    np.testing.assert_allclose(vals, full_vals[order], rtol=1e-3)
    np.testing.assert_allclose(np.abs(np.sum(vecs * full_vecs[:, order], axis=0)), 1.0, atol=1e-3)  # up to sign
    again_vals, again_vecs = top_eigh(gram, 16)
    np.testing.assert_array_equal(again_vecs, vecs)  # seeded: the same fit for the same rows
