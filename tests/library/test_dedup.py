import numpy as np
import pytest

from dsonet.library.view.dedup import DedupError, _transposed, duplicate_clusters


def brute_force(vectors, domains, threshold):
    """All pairs, then min-label propagation to a fixed point (a different algorithm from the code's)."""
    x = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    dom = np.array(domains)
    adjacent = (x @ x.T > threshold) & (dom[:, None] == dom[None, :])
    labels = np.arange(len(x))
    while True:
        new = np.where(adjacent, labels[None, :], len(x)).min(axis=1)
        if (new == labels).all():
            return labels
        labels = new


def planted(n, d, seed, cosines=(0.9, 0.99)):
    """Random unit vectors with every odd row a perturbed copy of the row before it."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32) + 0.3  # not centred, like real embeddings
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    m = n // 2
    c = rng.uniform(*cosines, size=(m, 1)).astype(np.float32)
    noise = rng.standard_normal((m, d)).astype(np.float32)
    noise -= np.einsum("ij,ij->i", noise, x[0 : 2 * m : 2])[:, None] * x[0 : 2 * m : 2]
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    x[1 : 2 * m : 2] = c * x[0 : 2 * m : 2] + np.sqrt(1 - c * c) * noise
    return x


@pytest.mark.parametrize("method", ["exact", "lsh"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clusters_match_brute_force_on_small_inputs(method, seed):
    x = planted(300, 384, seed)
    domains = [["math", "code"][i % 4 // 2] for i in range(300)]  # pairs (2k, 2k+1) share a domain
    expected = brute_force(x, domains, 0.95)
    assert (expected != np.arange(300)).sum() > 20  # the inputs really contain duplicates
    np.testing.assert_array_equal(duplicate_clusters(x, domains, 0.95, method=method), expected)


def test_lsh_finds_planted_duplicates_at_d7680():
    x = planted(2000, 7680, 3, cosines=(0.93, 0.995))
    reps = duplicate_clusters(x, ["general"] * 2000, method="lsh")
    np.testing.assert_array_equal(reps, brute_force(x, ["general"] * 2000, 0.95))


def test_single_linkage_chains_through_a_middle_vector():
    a = np.array([1.0, 0.0, 0.0])
    b = np.array([np.cos(0.25), np.sin(0.25), 0.0])  # cos(a, b) = 0.969
    c = np.array([np.cos(0.5), np.sin(0.5), 0.0])  # cos(a, c) = 0.878, cos(b, c) = 0.969
    far = np.array([0.0, 0.0, 1.0])
    reps = duplicate_clusters(np.stack([far, c, a, b]), ["x"] * 4)
    np.testing.assert_array_equal(reps, [0, 1, 1, 1])


def test_identical_vectors_in_different_domains_stay_apart():
    x = np.ones((4, 8), dtype=np.float32)
    np.testing.assert_array_equal(duplicate_clusters(x, ["a", "b", "a", "b"]), [0, 1, 0, 1])


def test_a_crowd_of_identical_vectors_is_one_cluster_with_lsh():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((500, 1024)).astype(np.float32)
    x[100:400] = x[100]  # one bucket of 300 in every table
    reps = duplicate_clusters(x, ["d"] * 500, method="lsh")
    assert (reps[100:400] == 100).all()
    assert len(np.unique(reps)) == 500 - 299


def test_empty_input_gives_empty_output():
    assert duplicate_clusters(np.zeros((0, 16), np.float32), []).shape == (0,)


def test_wrong_number_of_domains_names_the_field():
    with pytest.raises(DedupError, match="domains: 2 entries for 3 vectors"):
        duplicate_clusters(np.ones((3, 4), np.float32), ["a", "b"])


def test_nan_rows_are_rejected():
    x = np.ones((3, 4), np.float32)
    x[1, 2] = np.nan
    with pytest.raises(DedupError, match="NaN"):
        duplicate_clusters(x, ["a"] * 3)


@pytest.mark.slow
def test_ten_thousand_vectors_at_d7680_find_every_planted_duplicate():
    """The size of a DeltaSoup round; its speed is measured by `dso bench robustness` (merge phase)."""
    x = planted(10_000, 7680, 4)
    reps = duplicate_clusters(x, ["g"] * 10_000)
    duplicate = np.einsum("ij,ij->i", x[0::2], x[1::2]) > 0.95
    assert duplicate.sum() > 1000
    np.testing.assert_array_equal(reps[1::2] == np.arange(0, 10_000, 2), duplicate)


def test_rows_on_demand_gives_the_same_clusters_holding_small_blocks():
    from dsonet.library.view.dedup import duplicate_clusters_by_rows

    x = planted(1200, 1024, 6)
    domains = [["a", "b", "c"][i // 2 % 3] for i in range(1200)]
    fetched = []

    def rows(idx):
        fetched.append(len(idx))
        return x[idx]

    got = duplicate_clusters_by_rows(rows, 1200, 1024, domains, chunk=256)
    np.testing.assert_array_equal(got, duplicate_clusters(x, domains, method="lsh"))
    np.testing.assert_array_equal(got, brute_force(x, domains, 0.95))
    assert max(fetched) <= 256


@pytest.mark.parametrize("n", [1, 255, 256, 600])
def test_transposed_is_a_contiguous_copy_of_the_transpose(n):
    a = np.arange(n * 7, dtype=np.float32).reshape(n, 7)
    t = _transposed(a)
    assert t.flags.c_contiguous and not np.shares_memory(t, a) and np.array_equal(t, a.T)
