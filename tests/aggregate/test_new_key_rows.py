"""Keys not yet trusted have a row budget, per key and, past each key's free rows, one all of them
share, counted over the rate window (pending and settled batches alike); trusted keys do not; a
batch over budget is `RateLimited` (a timing problem: a receiver may hold it and try again)."""

import pytest

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig, RateLimited

from agg_helpers import NOW, PROFILE

HOUR = 3_600_000


def _soup(**limits) -> DeltaSoup:
    return DeltaSoup(DeltaSoupConfig(**limits), [PROFILE])


def test_a_new_key_is_refused_past_its_rows_in_the_window_and_admitted_once_they_leave_it(batch_of, cloud):
    soup = _soup(new_key_row_limit=10, new_keys_row_limit=1000)
    soup.submit(batch_of("new", cloud(6, 0)).to_msgpack(), now_ms=NOW)  # pending: counts already
    with pytest.raises(RateLimited, match="sent 6 rows in the last 60 min; a key under reputation 0.7 may send 10") \
            as refused:
        soup.submit(batch_of("new", cloud(5, 1), ts=NOW + 1).to_msgpack(), now_ms=NOW)
    assert refused.value.field == "rows"
    soup.submit(batch_of("new", cloud(4, 2), ts=NOW + 2).to_msgpack(), now_ms=NOW)  # exactly the budget
    soup.settle(soup.round(now_ms=NOW).batches)
    late = batch_of("new", cloud(5, 1), ts=NOW + HOUR)
    with pytest.raises(RateLimited):
        soup.submit(late.to_msgpack(), now_ms=NOW + HOUR - 1)  # the first rows are still in the window
    soup.submit(late.to_msgpack(), now_ms=NOW + HOUR)


def test_rows_past_each_new_keys_free_rows_share_one_budget(batch_of, cloud):
    soup = _soup(new_key_row_limit=10, new_key_free_rows=2, new_keys_row_limit=19)
    for i in range(3):
        soup.submit(batch_of(f"k{i}", cloud(8, i)).to_msgpack(), now_ms=NOW)  # 6 past the free 2, each
    with pytest.raises(RateLimited, match="sent 18 rows past their first 2 each .* takes 19 such rows; this batch "
                                          "holds 2 more"):
        soup.submit(batch_of("k3", cloud(4, 3)).to_msgpack(), now_ms=NOW)
    soup.submit(batch_of("k3", cloud(3, 4)).to_msgpack(), now_ms=NOW)  # 2 free + 1: the budget's last row
    soup.submit(batch_of("k4", cloud(2, 5)).to_msgpack(), now_ms=NOW)  # within its free rows: never starved
    with pytest.raises(RateLimited):
        soup.submit(batch_of("k4", cloud(1, 6), ts=NOW + 1).to_msgpack(), now_ms=NOW)


def test_trusted_keys_have_no_row_budget_and_released_batches_give_their_rows_back(batch_of, cloud):
    soup = _soup(new_key_row_limit=10, new_key_free_rows=0, new_keys_row_limit=10)
    old = batch_of("old", cloud(30, 0))
    soup.reputation.restore({old.node_id: (0.9, 0, 0)})
    soup.submit(old.to_msgpack(), now_ms=NOW)  # 30 rows: a trusted key is not a newcomer
    soup.submit(batch_of("new", cloud(10, 1)).to_msgpack(), now_ms=NOW)
    with pytest.raises(RateLimited):
        soup.submit(batch_of("other", cloud(1, 2)).to_msgpack(), now_ms=NOW)
    soup.release(soup.round(now_ms=NOW).batches)  # not stored (a full disk): the rows were not taken
    soup.submit(batch_of("other", cloud(1, 2)).to_msgpack(), now_ms=NOW)


def test_the_default_budgets_cover_an_honest_newcomer_until_outcomes_make_it_trusted():
    """Admitted batches lift a new key to the volume ceiling only (0.6, issue 24); three helpful outcomes
    then make it trusted (0.708); the node publishes at most 100 rows a batch."""
    from dsonet.aggregate import Reputation
    from dsonet.network.node import NodeConfig
    from pathlib import Path

    c = DeltaSoupConfig()
    rep = Reputation(c.rep_decay, c.rep_floor, c.rep_initial, c.volume_ceiling, c.trusted)
    for _ in range(6):
        rep.admitted("newcomer")
    assert not rep.trusted("newcomer")
    for _ in range(3):
        rep.outcome("newcomer", helped=True)
    assert rep.trusted("newcomer")
    assert 6 * NodeConfig(Path(".")).max_batch_experiences <= c.new_key_row_limit <= c.new_keys_row_limit
    assert c.new_key_row_limit >= c.max_batch_experiences  # any valid batch can be a newcomer's first
    assert c.new_key_free_rows >= 5 * NodeConfig(Path(".")).batch_size  # a learner's hour draws on no shared budget


def test_the_papers_deltasoup_has_no_row_budget(batch_of, cloud):
    soup = DeltaSoup(DeltaSoupConfig.paper(), [PROFILE])
    for i in range(3):
        soup.submit(batch_of(f"big{i}", cloud(900, i)).to_msgpack(), now_ms=NOW)
