import numpy as np
import pytest

from dsonet.aggregate import decompress_batches
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
        batches = [make_batch(list(b.experiences), cloud(len(b), i), profile, _ident(i), timestamp_ms=b.timestamp_ms)
                   for i, b in enumerate(batches)]
    rows = decompress_batches(batches)
    expected = np.concatenate([decompress(b.codes) for b in batches])
    np.testing.assert_allclose(rows.vectors, expected, rtol=1e-6, atol=1e-6)
    assert rows.batch.tolist() == [0] * 5 + [1] * 3 and rows.row.tolist() == [0, 1, 2, 3, 4, 0, 1, 2]


def _ident(i):
    from dsonet.identity import NodeIdentity

    return NodeIdentity.from_seed(f"p{i}".encode())


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
