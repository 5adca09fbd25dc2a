import numpy as np
import pytest

from dsonet.codec import compress, decompress
from dsonet.library.index import CodeIndex
from lib_helpers import unit


@pytest.mark.parametrize("group_size, seed", [(384, None), (96, None), (48, 7), (384, 7)])
def test_asymmetric_score_equals_cosine_with_the_reconstruction(group_size, seed):
    x, q = unit(200, 1), unit(1, 2)[0]
    index = CodeIndex(384, group_size, seed)
    for part in (x[:120], x[120:]):  # two batches, two baselines
        codes = compress(part, group_size, rotation_seed=seed)
        b = index.add_baseline(codes.baseline)
        index.add(codes.signs, codes.scales, np.full(len(part), b, np.int32))
    recon = np.concatenate([decompress(compress(p, group_size, rotation_seed=seed)) for p in (x[:120], x[120:])])
    expected = recon @ q / np.linalg.norm(recon, axis=1)
    np.testing.assert_allclose(index.score(q, np.arange(200)), expected, atol=1e-5)
    np.testing.assert_allclose(index.reconstruct(np.arange(200)), recon, atol=1e-5)


def test_search_skips_removed_rows_and_respects_the_allowed_mask():
    x = unit(500, 3)
    codes = compress(x, 384)
    index = CodeIndex(384, 384, None)
    index.add(codes.signs, codes.scales, np.full(500, index.add_baseline(codes.baseline), np.int32))
    rows, _ = index.search(x[10], 5, 64)
    assert rows[0] == 10
    index.remove(np.array([10]))
    assert 10 not in index.search(x[10], 5, 64)[0]
    allowed = np.zeros(500, bool)
    allowed[400:] = True
    assert (index.search(x[10], 5, 64, allowed)[0] >= 400).all()
