"""The main job: the Fleet seam, the report's statistics, and the whole demo end to end, shrunk
(real SmolLM2, real encoder, real codec, signatures and DeltaSoup)."""

import asyncio
import json
import os
import shutil

import numpy as np
import pytest

from dsonet.demo import DemoConfig, Fleet, format_report, run_demo
from dsonet.demo import adversary
from dsonet.demo.agents import Answers, split_tasks
from dsonet.sim.nodes import running
from dsonet.demo.report import conditions
from dsonet.experience import Experience, Provenance
from dsonet.library import Hit
from dsonet.sim.attacks import Forgery

LESSON = "When fractions have different denominators, rewrite them over the least common multiple."
NATS = pytest.param("nats", marks=[pytest.mark.slow, pytest.mark.nats])


def test_demo_refuses_a_byzantine_majority():
    with pytest.raises(Exception, match="majority"):
        DemoConfig(nodes=4, byzantine=2)


def test_demo_refuses_a_workdir_that_already_holds_nodes(tmp_path):
    (tmp_path / "node0").mkdir()
    with pytest.raises(Exception, match="not empty"):
        asyncio.run(run_demo(DemoConfig(nodes=3, byzantine=1, workdir=tmp_path), echo=lambda _: None))


@pytest.mark.parametrize("task", ["letter_counting", "rg:chain_sum"])
def test_training_slices_and_held_out_tasks_never_share_a_question(task):
    tasks, train, validation, held_out = split_tasks(task, train_slices=6, train_per_slice=2, eval_tasks=60, seed=0,
                                                     validation=12)

    questions = [t.question for s in (*train, validation, held_out) for t in s.tasks]
    assert [len(s.tasks) for s in train] == [2] * 6 and len(validation.tasks) == 12 and len(held_out.tasks) == 60
    assert len(set(questions)) == 84 == len(tasks.tasks)


def test_conditions_are_paired_with_the_answers_without_lessons():
    def answers(correct, lessons, parsed=(True, True, True, True)):
        return Answers(np.array(correct, float), np.array(parsed), lessons, [[]] * 4, [""] * 4, 0)

    attacker, honest = "b" * 64, "a" * 64

    def hit(node_id):
        return Hit(Experience(LESSON, "math", 0.5, Provenance(node_id)), 0.7)

    rows = conditions({"without": answers([0, 0, 1, 1], [[], [], [], []]),
                       "poisoned": answers([1, 0, 1, 0], [[hit(honest)], [hit(attacker)], [], [hit(honest), hit(attacker)]],
                                           parsed=(True, False, True, True))},
                      attackers={attacker})

    without, poisoned = rows
    assert (without.accuracy, without.minus_without, without.coverage) == (0.5, 0.0, 0.0)
    assert poisoned.accuracy == 0.5 and poisoned.minus_without == 0.0
    assert poisoned.coverage == 0.75 and poisoned.from_attackers == 0.5
    assert (without.parse_failures, poisoned.parse_failures) == (0, 1)
    assert poisoned.minus_without_ci95[0] < 0 < poisoned.minus_without_ci95[1]  # one task gained, one lost
    assert without.wilson95[0] < 0.5 < without.wilson95[1]


@pytest.mark.parametrize("kind", ["in-process", NATS])
def test_a_fleet_shares_a_lesson_and_refuses_a_forged_batch(tmp_path, kind):
    if kind == "nats" and shutil.which("nats-server") is None:
        pytest.skip("nats-server is not on PATH: `make test` installs it (apt-get install nats-server)")

    async def main():
        async with running(kind == "nats", 2, tmp_path) as fleet:
            assert isinstance(fleet, Fleet) and fleet.kind == kind
            fleet.stores[0].add(LESSON, domain="math", confidence=0.8, provenance=Provenance(fleet.node_ids[0]))
            await fleet.publish()
            await fleet.settle()
            byz = adversary.byzantine_nodes(1)
            seen = adversary.view(fleet.wire(), dict(zip(fleet.node_ids, fleet.public_keys)), fleet.encoder,
                                  fleet.profile, ["How do I add 1/3 and 1/4?"], seed=0)
            sent = await adversary.strike(fleet.attacker, [(byz[0], Forgery())], seen, "math")
            await fleet.settle()
            found = fleet.stores[1].search(LESSON, min_similarity=0.5)
            wire = fleet.wire()
            final = await fleet.close()
        return byz[0], sent, found, wire, final

    attacker, sent, found, wire, final = asyncio.run(main())

    assert [m.headers["Dso-Node"] for m in wire] == [final[0].node_id, attacker.node_id]
    assert [h.experience.text for h in found] == [LESSON]
    assert [(s.attack, s.experiences) for s in sent] == [("forgery", 1)]
    assert {e.provenance.node_id for e in final[1].experiences} == {final[0].node_id}
    for state in final:  # the forged batch claims an honest node's identity; both refused it
        assert sum(p["rejected"] for p in state.peers) == 1


@pytest.mark.slow
def test_small_fleet_learns_shares_and_keeps_every_attack_but_poison_out(tmp_path):
    config = DemoConfig(nodes=4, byzantine=1, train_per_node=2, eval_tasks=4, rollouts=3, max_tokens=24,
                        llm_model="smollm2", workdir=tmp_path)
    report = asyncio.run(run_demo(config, echo=lambda _: None))

    assert report.fleet == "in-process" and report.n_eval == 4
    assert [n.role for n in report.nodes].count("honest") == 3
    attacks = {a.name: a for a in report.attacks}
    assert {"hijack", "random_signs", "forgery", "poison"} <= set(attacks)
    assert all(a.held_by_honest_libraries == 0 for name, a in attacks.items() if name != "poison")
    assert attacks["poison"].experiences_sent == len(adversary.wrong_lessons("reasoning.letter_counting")) == 3
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.produced > 0 and attacker.published_bytes > 0 and attacker.batches_rejected > 0
    assert [c.name for c in report.conditions] == ["without", "own", "fleet", "poisoned"]
    for c in report.conditions:
        assert c.wilson95[0] <= c.accuracy <= c.wilson95[1]
        assert c.minus_without_ci95[0] - 1e-9 <= c.minus_without <= c.minus_without_ci95[1] + 1e-9
    assert report.condition("without").coverage == 0.0
    assert report.learning.rollouts == 3 * 2 * 3
    if report.fidelity.n:
        assert report.fidelity.cosine_mean > 0.5  # rotated BitDelta in the Zen space keeps ~0.7-0.9
    assert json.loads(json.dumps(report.to_dict()))["conditions"][0]["name"] == "without"
    text = format_report(report)
    assert "Held-out accuracy" in text and "Attacks" in text and "fleet + poison" in text


@pytest.mark.slow
@pytest.mark.nats
def test_the_same_fleet_runs_as_node_processes_over_a_nats_cluster(tmp_path):
    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not on PATH: `make test` installs it (apt-get install nats-server)")
    config = DemoConfig(nodes=3, byzantine=1, train_per_node=2, eval_tasks=2, rollouts=3, max_tokens=24,
                        llm_model="smollm2", nats=True, workdir=tmp_path)
    report = asyncio.run(run_demo(config, echo=lambda _: None))

    assert report.fleet == "nats" and report.n_eval == 2
    assert [n.role for n in report.nodes].count("honest") == 2
    assert all(a.held_by_honest_libraries == 0 for a in report.attacks if a.name != "poison")
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.batches_rejected >= 2  # its forged batch, refused by both honest node processes
    assert [c.name for c in report.conditions] == ["without", "own", "fleet", "poisoned"]
    pids = [p.read_text().strip() for p in (tmp_path / "nats").glob("*.pid")]
    assert not any(pid and _alive(int(pid)) for pid in pids)  # the cluster is down


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
