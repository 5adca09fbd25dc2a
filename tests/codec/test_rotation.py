import numpy as np
import pytest

from dsonet.codec.rotation import Rotation, _factor


@pytest.mark.parametrize("dim", [1, 7, 12, 384, 768, 7680, 8192])
def test_rotation_is_orthogonal_and_exactly_invertible(dim):
    r = Rotation(dim, seed=3)
    x = np.random.default_rng(dim).standard_normal((9, dim)).astype(np.float32)
    y = r.apply(x)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-5)
    np.testing.assert_allclose(r.invert(y), x, atol=1e-5)
    np.testing.assert_allclose(y @ y.T, x @ x.T, rtol=1e-4, atol=1e-3)  # inner products preserved


def test_rotation_is_deterministic_in_its_seed():
    x = np.eye(4, 768, dtype=np.float32)
    np.testing.assert_array_equal(Rotation(768, 5).apply(x), Rotation(768, 5).apply(x))
    assert not np.allclose(Rotation(768, 5).apply(x), Rotation(768, 6).apply(x))


def test_rotation_spreads_a_single_coordinate_over_all_coordinates():
    x = np.zeros((1, 7680), np.float32)
    x[0, 123] = 1.0
    y = Rotation(7680, 1).apply(x)[0]
    assert (np.abs(y) > 0).all()
    assert np.abs(y).max() < 0.1  # no coordinate keeps more than 1% of the energy


def test_dimension_factors_into_odd_part_and_two_powers():
    assert _factor(7680) == (15, 16, 32)
    assert _factor(384) == (3, 8, 16)
    assert _factor(7) == (7, 1, 1)
