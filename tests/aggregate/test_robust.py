import numpy as np
import pytest

from dsonet.aggregate import AggregationError
from dsonet.aggregate import robust


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_coordinate_median_and_mad_match_numpy_for_odd_and_even_rows_and_leave_the_input_alone(n):
    x = np.random.default_rng(n).standard_normal((n, 33)).astype(np.float32)
    given = x.copy()
    np.testing.assert_allclose(robust.coordinate_median(x), np.median(x, axis=0), rtol=1e-6)
    mu, mad = robust.median_and_mad(x)
    np.testing.assert_allclose(mu, np.median(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(mad, np.median(np.abs(x - mu), axis=0), rtol=1e-6)
    np.testing.assert_array_equal(x, given)  # one row: x.T is contiguous, and a view of it was zeroed


def test_mad_scores_are_the_papers_mean_normalised_deviation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2500, 16)).astype(np.float32)  # more rows than one scoring block
    mu, sigma = np.full(16, 0.5, np.float32), np.full(16, 2.0, np.float32)
    expected = (np.abs(x - mu) / (sigma + 1e-8)).mean(axis=1)
    np.testing.assert_allclose(robust.mad_scores(x, mu, sigma, 1e-8), expected, rtol=1e-5)


def test_trimmed_mean_ignores_extremes_and_names_its_precondition():
    x = np.array([[0.0], [1.0], [2.0], [3.0], [1000.0]], np.float32)
    assert robust.trimmed_mean(x, 0.2)[0] == pytest.approx(2.0)
    with pytest.raises(AggregationError, match=r"beta: trim fraction must lie in \[0, 0.5\), got 0.5"):
        robust.trimmed_mean(x, 0.5)


def test_geometric_median_resists_a_minority_of_far_points():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 0.1, (70, 8)), np.full((30, 8), 100.0)]).astype(np.float32)
    z = robust.geometric_median(x)
    assert np.linalg.norm(z) < 0.5
    assert np.linalg.norm(x.mean(axis=0)) > 50


def test_multi_krum_keeps_the_crowd_and_requires_2f_plus_3_rows():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(0, 0.1, (20, 8)), rng.normal(5, 0.1, (5, 8))]).astype(np.float32)
    keep = robust.multi_krum_select(robust.krum_scores(x, x, f=5), keep=20)
    assert keep[:20].all() and not keep[20:].any()
    with pytest.raises(AggregationError, match=r"2f\+3 = 13 reference rows for f=5, got 12"):
        robust.krum_scores(x, x[:12], f=5)


def test_sample_rows_is_seeded_and_uniform_without_replacement():
    x = np.arange(100, dtype=np.float32)[:, None]
    a = robust.sample_rows(x, 10, np.random.default_rng(3))
    b = robust.sample_rows(x, 10, np.random.default_rng(3))
    assert np.array_equal(a, b) and len(np.unique(a)) == 10
    assert robust.sample_rows(x, None, np.random.default_rng(0)) is x
