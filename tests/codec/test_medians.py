import numpy as np
import pytest

from dsonet.codec.medians import row_medians


@pytest.mark.parametrize("n", [1, 2, 9, 10])
def test_row_medians_are_numpys_to_the_bit_and_never_alias_the_scratch(n):
    a = np.random.default_rng(n).standard_normal((17, n)).astype(np.float32)
    expected = np.median(a, axis=1).astype(np.float32)
    got = row_medians(a.copy())
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    scratch = a.copy()
    out = row_medians(scratch)
    scratch[:] = 0
    np.testing.assert_array_equal(out, expected)
