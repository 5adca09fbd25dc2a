"""The node's bounded logs: a round's admissions and refusals per sender and rule, reputation points
after rounds and outcomes, and the bounds that keep both logs from growing without end."""

import numpy as np

from dsonet.aggregate import RoundResult
from dsonet.codec import default_profile, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.journal import Journal

DIM = 16
PROFILE = default_profile(DIM, "none")
ALICE, MALLORY = NodeIdentity.from_seed(b"journal-alice"), NodeIdentity.from_seed(b"journal-mallory")


def _batch(who: NodeIdentity, n: int, tag: str):
    v = np.random.default_rng(n).standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    exps = [Experience(f"When {tag} case {i} comes, do step {i}.", "math") for i in range(n)]
    return make_batch(exps, v, PROFILE, who)


def _round(*parts: tuple) -> RoundResult:
    """parts: (batch, keep mask, reason of the refused rows)."""
    rejected = [(b.node_id, b.experiences[i].id, reason) for b, keep, reason in parts for i in np.flatnonzero(~keep)]
    return RoundResult([p[0] for p in parts], [p[1] for p in parts], rejected, {"rows": sum(len(p[0]) for p in parts)})


def test_a_round_logs_what_each_sender_got_admitted_and_refused_by_which_rule(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite")
    reputation = {ALICE.node_id: 0.55, MALLORY.node_id: 0.45}
    alice, mallory = _batch(ALICE, 4, "alice"), _batch(MALLORY, 3, "mallory")
    journal.refused(MALLORY.node_id, "signature: does not verify with the sender's key")  # a whole batch, before
    journal.stored(ALICE.node_id, new=3, held=1)
    result = _round((alice, np.ones(4, bool), ""), (mallory, np.array([True, False, False]), "filter: median"))
    seq = journal.round(result, at_ms=1_000, reputation=reputation.get)

    [logged] = journal.rounds()
    assert logged.seq == seq and logged.at_ms == 1_000
    assert (logged.batches, logged.rows, logged.admitted, logged.new, logged.held) == (2, 7, 5, 3, 1)
    assert logged.refused == {"filter: median": 2, "signature: does not verify with the sender's key": 1}
    assert logged.senders[MALLORY.node_id]["refused"] == logged.refused
    assert logged.senders[ALICE.node_id] == {"batches": 1, "admitted": 4, "new": 3, "held": 1, "refused": {}}
    history = journal.history()
    assert {k: [(p.at_ms, p.reputation, p.cause) for p in v] for k, v in history.items()} == {
        ALICE.node_id: [(1_000, 0.55, "round")], MALLORY.node_id: [(1_000, 0.45, "round")]}
    assert journal.totals()[MALLORY.node_id] == {"batches": 1, "admitted": 1, "refused": logged.refused,
                                                 "last_ms": 1_000}
    assert [r.seq for r in journal.rounds(sender=ALICE.node_id)] == [seq]
    assert journal.rounds(sender="someone else") == []


def test_a_round_with_nothing_in_it_is_not_logged_and_a_refusal_alone_is(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite")
    assert journal.round(RoundResult([], [], [], {}), at_ms=1, reputation=lambda _: 0.5) is None
    journal.refused("0" * 64, "stale: 400 s old")
    journal.round(RoundResult([], [], [], {}), at_ms=2, reputation=lambda _: 0.5)
    [logged] = journal.rounds()
    assert (logged.at_ms, logged.batches, logged.refused) == (2, 0, {"stale: 400 s old": 1})
    assert journal.history() == {}  # a refused batch's sender is not judged by the round: no point


def test_outcomes_add_helped_and_harmed_points_after_the_reputation_moved(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite")
    journal.outcome([ALICE.node_id, ALICE.node_id], True, {ALICE.node_id: 0.6}.get, at_ms=5)
    journal.outcome([ALICE.node_id], False, {ALICE.node_id: 0.54}.get, at_ms=6)
    assert [(p.at_ms, p.reputation, p.cause) for p in journal.history([ALICE.node_id])[ALICE.node_id]] == [
        (5, 0.6, "helped"), (6, 0.54, "harmed")]


def test_both_logs_keep_only_their_newest_lines(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite", rounds=5, points=3, all_points=7)
    batch = _batch(ALICE, 2, "alice")
    for t in range(12):
        journal.round(_round((batch, np.ones(2, bool), "")), at_ms=t, reputation=lambda _: t / 100)
    assert [r.at_ms for r in journal.rounds(limit=100)] == [11, 10, 9, 8, 7]
    assert [p.at_ms for p in journal.history()[ALICE.node_id]] == [9, 10, 11]
    assert [p.at_ms for p in journal.history([ALICE.node_id], latest=2)[ALICE.node_id]] == [10, 11]
    sybils = [f"{i:064x}" for i in range(10)]
    journal.outcome(sybils, False, lambda _: 0.45, at_ms=20)
    held = journal.history()
    assert sum(len(v) for v in held.values()) == 7 and ALICE.node_id not in held  # the oldest went first


def test_running_totals_add_up_every_round_and_keep_the_peers_most_recently_heard_from(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite", rounds=2, peers=2)
    alice, mallory = _batch(ALICE, 2, "alice"), _batch(MALLORY, 2, "mallory")
    for t in range(5):  # more rounds than the log keeps: the totals still count them all
        journal.round(_round((alice, np.array([True, t % 2 == 0]), "filter: median")), at_ms=t, reputation=lambda _: .5)
    assert journal.totals() == {ALICE.node_id: {"batches": 5, "admitted": 8, "refused": {"filter: median": 2},
                                                "last_ms": 4}}
    journal.round(_round((mallory, np.ones(2, bool), "")), at_ms=5, reputation=lambda _: 0.5)
    journal.refused("0" * 64, "signature (whole batch)")
    journal.round(RoundResult([], [], [], {}), at_ms=6, reputation=lambda _: 0.5)
    assert list(journal.totals()) == ["0" * 64, MALLORY.node_id]  # alice, heard from least recently, went
    assert list(journal.totals(limit=1)) == ["0" * 64]


def test_a_damaged_log_is_moved_aside_and_a_new_one_started(tmp_path):
    path = tmp_path / "journal.sqlite"
    path.write_bytes(b"not a database at all, " * 100)
    journal = Journal(path)
    journal.refused("0" * 64, "banned")
    journal.round(RoundResult([], [], [], {}), at_ms=1, reputation=lambda _: 0.5)
    assert [r.refused for r in journal.rounds()] == [{"banned": 1}]
    assert (tmp_path / "journal.sqlite.damaged").read_bytes().startswith(b"not a database")
    assert path.stat().st_mode & 0o077 == 0
