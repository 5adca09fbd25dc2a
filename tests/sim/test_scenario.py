"""The drift scenario's splits: instances never repeated, each honest node its own facts, the held-out
instances covering every fact with one domain (so no library label reaches retrieval)."""

from dsonet.sim import scenario


def test_splits_never_repeat_an_instance_and_give_each_node_its_own_facts():
    plan = scenario.DriftPlan(facts=9, train_per_fact=2)
    splits = scenario.make_splits(plan, seed=1)
    ids = [t.id for part in splits.train for t in part] + [t.id for t in splits.validation + splits.held_out]
    assert len(ids) == len(set(ids))
    facts = [{t.entry["fact"] for t in part} for part in splits.train]
    assert all(a.isdisjoint(b) for i, a in enumerate(facts) for b in facts[i + 1:])
    held = {t.entry["fact"] for t in splits.held_out}
    assert held == {f.id for f in scenario.facts_for(plan)}  # every fact and control is held out
    assert {t.domain for t in splits.held_out} == {scenario.DOMAIN}  # no library label reaches retrieval
    # the deal rotates with the seed; the held-out items do not depend on it
    other = scenario.make_splits(plan, seed=2)
    assert [t.id for t in other.held_out] == [t.id for t in splits.held_out]
    assert [{t.entry["fact"] for t in p} for p in other.train] != facts


def test_practice_instances_only_feed_the_feedback_phase_and_leave_the_held_out_ones_as_they_were():
    plan = scenario.DriftPlan(facts=6)
    base = scenario.make_splits(plan, seed=0)
    more = scenario.make_splits(scenario.DriftPlan(facts=6, practice_per_fact=2), seed=0)
    assert [t.id for t in more.held_out] == [t.id for t in base.held_out]
    assert [t.id for t in more.validation] == [t.id for t in base.validation]
    assert [[t.id for t in p] for p in more.train] == [[t.id for t in p] for p in base.train]
    assert len(more.practice) == 2 * len(scenario.facts_for(plan)) and not base.practice
    learned_or_held = {t.id for p in more.train for t in p} | {t.id for t in more.validation + more.held_out}
    assert not learned_or_held & {t.id for t in more.practice}
    assert {t.id for t in more.feedback} == {t.id for t in base.feedback} | {t.id for t in more.practice}
    assert [t.id for t in base.feedback] == [t.id for t in scenario.make_splits(plan, seed=0).feedback]
