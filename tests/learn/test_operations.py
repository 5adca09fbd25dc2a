"""Operation logic against a dict-backed store: the subject here is the decision and apply rules,
not storage (the real SQLite library is exercised in test_learner_with_library.py)."""

from dsonet.experience import Experience
from dsonet.scope import Probe, Scope
from dsonet.learn.operations import (Operation, Proposal, apply, confidence_from_gap, decide, listing,
                                     merge_duplicate_adds)

from .conftest import DictStore


P = Proposal("When a sum has negatives, track the sign of each term.", "math.arithmetic", 0.9, "t1")


def test_confidence_grows_with_reward_gap_and_stays_below_one():
    assert confidence_from_gap(1.0, 0.0) == 0.95
    assert confidence_from_gap(0.6, 0.4) < confidence_from_gap(1.0, 0.0)
    assert confidence_from_gap(0.0, 0.0) == 0.5


def test_decide_maps_short_ids_to_real_ids():
    store = DictStore()
    old = store.add("When adding, line up the digits first.", "math.arithmetic")
    _, ids = listing([old])
    op, why = decide(P, '{"op": "UPDATE", "id": "E1", "text": "When adding signed numbers, line up digits and signs."}',
                     ids)
    assert why == "" and op.op == "UPDATE" and op.target == old.id
    assert op.text == "When adding signed numbers, line up digits and signs."


def test_decide_rejects_unknown_ids_bad_ops_and_long_updates():
    _, ids = listing([Experience("When adding, line up the digits first.")])
    assert decide(P, '{"op": "DELETE", "id": "E7"}', ids)[0] is None
    assert "E7" in decide(P, '{"op": "DELETE", "id": "E7"}', ids)[1]
    assert decide(P, '{"op": "REWRITE", "id": "E1"}', ids)[0] is None
    long = " ".join(["word"] * 40)
    assert "words" in decide(P, f'{{"op": "UPDATE", "id": "E1", "text": "{long}"}}', ids)[1]
    # the batch prompt's example text echoed back replaces nothing (the drift bench's reflector wrote it)
    assert "is not a 'When X, do Y' lesson" in decide(P, '{"op": "UPDATE", "id": "E1", "text": "When ..., ..."}', ids)[1]
    assert decide(P, "no idea", ids)[0] is None


def test_duplicate_adds_merge_keeping_the_highest_confidence():
    low = Proposal(P.text.upper().rstrip(".") + ".", P.domain, 0.6)
    ops = [Operation("ADD", low), Operation("NONE", P), Operation("ADD", P)]
    merged = merge_duplicate_adds(ops)
    assert [o.op for o in merged] == ["ADD", "NONE"]
    assert merged[0].proposal.confidence == 0.9


def test_apply_adds_updates_deletes_and_refuses_duplicates():
    store = DictStore()
    old = store.add("When adding, line up the digits first.", "math.arithmetic")
    gone = store.add("When stuck, guess a round number.", "math.arithmetic")
    results = apply(store, [Operation("ADD", P), Operation("ADD", P),
                            Operation("UPDATE", P, target=old.id, text="When adding, align digits by place value."),
                            Operation("DELETE", P, target=gone.id), Operation("DELETE", P, target=gone.id)])
    assert [r.applied for r in results] == [True, True, True, False]
    texts = sorted(e.text for e in store.items.values())
    assert texts == sorted([P.text, "When adding, align digits by place value."])
    assert "no longer exists" in results[-1].detail
    again = apply(store, [Operation("ADD", P)])
    assert not again[0].applied and again[0].operation.op == "NONE" and "duplicate" in again[0].detail


def test_apply_scopes_each_new_lesson_where_the_learner_practised():
    store = DictStore()
    here = Probe(Scope.parse(["numpy==1.26.4", "pandas==2.0.3", "python==3.11.9"]), {"numpy": ("numpy",)})
    lesson = Proposal("When integrating samples, call np.trapz(y, x): this numpy has no trapezoid.", "code.numpy", 0.9)
    (result,) = apply(store, [Operation("ADD", lesson)], scope_of=here.lesson_scope)
    assert store.items[result.detail].scope == Scope.parse(["numpy==1.26.4", "python==3.11.9"])
