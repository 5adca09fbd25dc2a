"""`dsonet.library.contract.record_on_members`: an outcome counts once on every experience a hit stands for."""

from dsonet.experience import Experience
from dsonet.library import Hit
from dsonet.library.contract import record_on_members
from dsonet.scope import Scope


class Counter:
    def __init__(self):
        self.calls = []

    def record_outcome(self, exp_id, helped, environment=None):
        self.calls.append((exp_id, helped, environment))


def test_an_outcome_counts_on_every_merged_member_and_on_a_lone_hit_itself():
    lone, merged = Experience("When alone, do one thing."), Experience("When merged, do the shared thing.")
    hits = [Hit(lone, 0.9), Hit(merged, 0.8, members=("a", "b", "c"))]
    store, here = Counter(), Scope.parse("numpy==2.4.6")
    assert record_on_members(store, hits, False, here) == 4
    assert store.calls == [(lone.id, False, here), ("a", False, here), ("b", False, here), ("c", False, here)]
