import numpy as np
import pytest

from dsonet.aggregate import decompress_batches, dedup_merge
from dsonet.aggregate.defences import cap_source_share
from dsonet.aggregate.reputation import Reputation
from dsonet.codec import compress, decompress
from dsonet.codec.batch import default_profile


@pytest.mark.parametrize("group_size,rotation", [(64, None), (32, None), (16, None), (64, 7)])
def test_decompress_batches_matches_the_codec_row_for_row(batch_of, cloud, group_size, rotation):
    batches = [batch_of("a", cloud(5, 0)), batch_of("b", cloud(3, 1))]
    if group_size != 64 or rotation is not None:  # rebuild with another profile: the codec is the reference
        from dsonet.codec.batch import Profile, make_batch

        profile = Profile(64, group_size, "test-encoder", rotation)
        batches = [make_batch(list(b.experiences), b.vectors(), profile, _ident(i), timestamp_ms=b.timestamp_ms)
                   for i, b in enumerate(batches)]
    rows = decompress_batches(batches)
    expected = np.concatenate([decompress(b.codes) for b in batches])
    np.testing.assert_allclose(rows.vectors, expected, rtol=1e-6, atol=1e-6)
    assert rows.batch.tolist() == [0] * 5 + [1] * 3 and rows.row.tolist() == [0, 1, 2, 3, 4, 0, 1, 2]


def _ident(i):
    from dsonet.identity import NodeIdentity

    return NodeIdentity.from_seed(f"p{i}".encode())


def test_dedup_merge_weights_by_confidence_takes_the_max_and_picks_the_trusted_text():
    a = np.array([1.0, 0.0, 0.0], np.float32)
    b = np.array([0.99, 0.14, 0.0], np.float32)  # cosine ≈ 0.99 with a
    c = np.array([0.0, 0.0, 1.0], np.float32)
    labels, vecs, conf, rep = dedup_merge(np.stack([a, b, c]), np.array([0.2, 0.99, 0.5]),
                                          ["d"] * 3, trust=np.array([1.0, 0.1, 1.0]))
    assert labels[0] == labels[1] != labels[2]
    merged = (0.2 * a + 0.99 * b) / np.linalg.norm(0.2 * a + 0.99 * b)
    np.testing.assert_allclose(vecs[labels[0]], merged, rtol=1e-5)
    assert conf[labels[0]] == pytest.approx(0.99)
    assert rep[labels[0]] == 0  # 0.2 × 1.0 beats 0.99 × 0.1: a distrusted 0.99 does not take the text


def test_dedup_merge_never_merges_across_domains():
    v = np.ones((2, 4), np.float32)
    labels, *_ = dedup_merge(v, np.array([0.5, 0.5]), ["math", "code"], trust=np.ones(2))
    assert labels[0] != labels[1]


def test_share_cap_trims_a_flooding_source_to_its_share():
    source = np.array([0] * 90 + list(range(1, 11)))
    keep = cap_source_share(np.ones(100, bool), source, np.zeros(100, np.int64), 0.2, np.random.default_rng(0))
    assert keep[:90].sum() == 20 and keep[90:].all()


def test_share_cap_always_allows_twice_a_fair_share():
    two = cap_source_share(np.ones(10, bool), np.array([0] * 9 + [1]), np.zeros(10, np.int64), 0.05,
                           np.random.default_rng(0))
    assert two.all()
    four = cap_source_share(np.ones(40, bool), np.array([0] * 25 + [1] * 5 + [2] * 5 + [3] * 5),
                            np.zeros(40, np.int64), 0.05, np.random.default_rng(0))
    assert four[:25].sum() == 20 and four[25:].all()  # 2/4 of 40


def test_reputation_is_the_papers_moving_average_with_a_floor():
    rep = Reputation(0.9, 0.3, initial=0.5)
    assert rep.update("n", 1) == pytest.approx(0.55)
    assert rep.update("n", 0) == pytest.approx(0.495)
    assert not rep.skipped("n") and rep.get("stranger") == 0.5
    for _ in range(10):
        rep.update("n", 0)
    assert rep.skipped("n")
    with pytest.raises(ValueError, match="r: 2"):
        rep.update("n", 2)


def test_dedup_merge_over_many_blocks_is_each_clusters_weighted_mean(monkeypatch):
    import dsonet.aggregate.phases as phases

    monkeypatch.setattr(phases, "_MERGE_BLOCK_BYTES", 3 * 8 * 16)  # 3 clusters a block at d = 16
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((9, 16)).astype(np.float32)
    owner = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 5, 5, 6, 7, 8, 8])  # clusters of 1 to 4 rows
    v = centers[owner] + 0.01 * rng.standard_normal((16, 16)).astype(np.float32)
    perm = rng.permutation(16)  # members scattered over the rows
    v, owner = v[perm], owner[perm]
    conf = rng.uniform(0, 1, 16)
    labels, vecs, cluster_conf, _ = dedup_merge(v, conf, ["d"] * 16, trust=np.ones(16))
    assert np.array_equal(labels[:, None] == labels[None, :], owner[:, None] == owner[None, :])
    for c in range(9):
        rows = np.flatnonzero(labels == c)
        mean = v[rows] if len(rows) == 1 else (conf[rows, None] * v[rows]).sum(0, keepdims=True)
        np.testing.assert_allclose(vecs[c], mean[0] / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
        assert cluster_conf[c] == conf[rows].max()


def test_dedup_merge_overwrite_gives_the_same_clusters_in_the_input_rows(monkeypatch):
    import dsonet.aggregate.phases as phases

    monkeypatch.setattr(phases, "_MERGE_BLOCK_BYTES", 2 * 8 * 8)  # 2 clusters a block at d = 8
    rng = np.random.default_rng(1)
    owner = np.array([3, 0, 1, 0, 2, 3, 1, 4, 2, 3])  # each cluster's rows spread out, first rows out of order
    v = rng.standard_normal((5, 8)).astype(np.float32)[owner] + 0.001 * rng.standard_normal((10, 8)).astype(np.float32)
    conf = rng.uniform(0, 1, 10)
    fresh = dedup_merge(v.copy(), conf, ["d"] * 10, trust=np.ones(10))
    rows = v.copy()
    over = dedup_merge(rows, conf, ["d"] * 10, trust=np.ones(10), overwrite=True)
    assert np.shares_memory(over[1], rows) and len(over[1]) == 5
    for a, b in zip(fresh, over):
        np.testing.assert_array_equal(a, b)
