"""The main job: the Fleet seam, the report's statistics, and the whole demo end to end, shrunk
(the real 0.5B, real sandbox, real encoder, real codec, signatures and DeltaSoup)."""

import asyncio
import json
import os
import shutil

import numpy as np
import pytest

from dsonet.demo import DemoConfig, Fleet, format_report, run_demo
from dsonet.demo.report import conditions
from dsonet.experience import Experience, Provenance
from dsonet.learn.evaluate import Run
from dsonet.library import Hit
from dsonet.sim import adversary
from dsonet.sim.attacks import Forgery
from dsonet.sim.scenario import running

LESSON = "When fractions have different denominators, rewrite them over the least common multiple."
NATS = pytest.param("nats", marks=[pytest.mark.slow, pytest.mark.nats])


def test_demo_refuses_a_byzantine_majority():
    with pytest.raises(Exception, match="majority"):
        DemoConfig(nodes=4, byzantine=2)


def test_demo_refuses_a_workdir_that_already_holds_nodes(tmp_path):
    (tmp_path / "node0").mkdir()
    with pytest.raises(Exception, match="not empty"):
        asyncio.run(run_demo(DemoConfig(nodes=3, byzantine=1, workdir=tmp_path), echo=lambda _: None))


def test_demo_refuses_more_facts_than_drift_has():
    with pytest.raises(Exception, match="facts: 999"):
        DemoConfig(facts=999)


def test_conditions_count_change_facts_only_and_pair_each_half_run_with_its_own_tasks():
    def run(correct, hits, texts=None):
        n = len(correct)
        return Run(np.array(correct, float), np.ones(n, bool), np.array([bool(h) for h in hits]),
                   texts or ["r = x.sum()"] * n, hits, 0, 0.0)

    attacker, honest = "b" * 64, "a" * 64

    def hit(node_id):
        return [Hit(Experience(LESSON, "code.python", 0.5, Provenance(node_id)), 0.7)]

    # six held-out tasks, the last a control; the half runs answer tasks 0, 1 and 5
    runs = {"without": run([0, 0, 1, 1, 1, 1], [[]] * 6),
            "fleet": run([1, 0, 1, 1, 1, 0], [hit(honest), [], [], [], [], hit(honest)]),
            "poisoned": run([1, 1, 0], [hit(attacker), hit(honest), hit(attacker)],
                            texts=["r = 1", "I cannot tell.", "r = 2"])}

    without, fleet, poisoned = conditions(runs, half=[0, 1, 5], control=[False] * 5 + [True], attackers={attacker})

    assert (without.n, without.accuracy, without.coverage) == (5, 0.6, 0.0)
    assert (fleet.n, fleet.accuracy, fleet.minus_without, fleet.coverage) == (5, 0.8, 0.2, 0.2)
    assert (poisoned.n, poisoned.accuracy, poisoned.minus_without) == (2, 1.0, 1.0)  # without got 0 of tasks 0 and 1
    assert poisoned.from_attackers == 0.5 and (poisoned.no_code, fleet.no_code) == (1, 0)
    assert fleet.minus_without_ci95[0] >= 0 and without.wilson95[0] < 0.6 < without.wilson95[1]


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
        assert sum(p["rejected"] for p in state.peers) == 1, state.peers  # each peer's last error says why


# The embedded 0.5B answers and writes lessons: on drift's code prompts SmolLM2's transformers path is the
# slower one on two cores (this demo with it ran past pytest's 600 s; with the 0.5B on llama.cpp, 150 s)
SMALL = dict(facts=1, train_per_fact=1, eval_per_fact=4, eval_per_control=1, feedback_tasks=2, rollouts=2,
             candidates=1, gate_items=1, max_tokens=32, llm_model="qwen2.5-coder-0.5b", reflector="qwen2.5-coder-0.5b",
             answer_cache=None, job=False)  # the act on the job has its own test (test_job.py)


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory):
    """The shrunk demo in process, its answers generated into a fresh cache that the NATS run of the
    same fleet then replays: that run is about the transport, and generating the same answers twice
    would only double the suite's slowest test."""
    answers = tmp_path_factory.mktemp("answers") / "answers.sqlite"
    config = DemoConfig(nodes=3, byzantine=1, workdir=tmp_path_factory.mktemp("fleet"), **{**SMALL, "answer_cache": answers})
    return asyncio.run(run_demo(config, echo=lambda _: None)), answers


@pytest.mark.slow
def test_small_fleet_learns_drift_shares_and_keeps_every_attack_but_poison_out(small_fleet):
    report, _ = small_fleet

    assert report.fleet == "in-process"
    assert [n.role for n in report.nodes].count("honest") == 2
    assert [c.name for c in report.conditions] == ["without", "own", "fleet", "poisoned", "after_feedback"]
    assert [c.n for c in report.conditions] == [4, 2, 4, 2, 2] and report.controls["n"] == 1
    for c in report.conditions:
        assert c.wilson95[0] <= c.accuracy <= c.wilson95[1]
        assert c.minus_without_ci95[0] - 1e-9 <= c.minus_without <= c.minus_without_ci95[1] + 1e-9
    assert report.condition("without").coverage == 0.0
    assert sum(report.ran["without"].values()) == sum(report.ran["fleet"].values()) == 5  # every reply was run
    assert report.learning.rollouts == 2 * 2  # G x the two training instances (a change fact and a control)
    attacks = {a.name: a for a in report.attacks}
    assert {"hijack", "random_signs", "forgery", "poison"} <= set(attacks)
    assert all(a.held_by_honest_libraries == 0 for name, a in attacks.items() if name != "poison")
    assert attacks["poison"].experiences_sent == len(report.poison.rows) == 1  # the change fact's wrong lesson
    for node in report.poison.nodes:  # every honest node admitted it, and says whether it dropped it and why
        [signer] = node.signers
        assert signer.name == "byz0" and node.held == 1 and signer.rows == ["p1"]
        assert node.dropped == (signer.rows if signer.dropped else [])
        assert signer.dropped == (signer.reputation < report.poison.floor)
    assert len(report.feedback["passed"]) == 2
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.produced > 0 and attacker.published_bytes > 0 and attacker.batches_rejected > 0
    if report.fidelity.n:
        assert report.fidelity.cosine_mean > 0.5  # rotated BitDelta in the Zen space keeps ~0.7-0.9
    assert json.loads(json.dumps(report.to_dict()))["conditions"][0]["name"] == "without"
    text = format_report(report)
    for section in ("Learning", "Attacks", "Poison", "Feedback", "Held-out accuracy", "after feedback"):
        assert section in text


@pytest.mark.slow
@pytest.mark.nats
def test_the_same_fleet_runs_as_node_processes_over_a_nats_cluster(tmp_path, small_fleet):
    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not on PATH: `make test` installs it (apt-get install nats-server)")
    in_process, answers = small_fleet
    config = DemoConfig(nodes=3, byzantine=1, nats=True, workdir=tmp_path, **{**SMALL, "answer_cache": answers})
    report = asyncio.run(run_demo(config, echo=lambda _: None))

    assert report.fleet == "nats"
    assert [n.role for n in report.nodes].count("honest") == 2
    assert all(a.held_by_honest_libraries == 0 for a in report.attacks if a.name != "poison")
    attacker = next(n for n in report.nodes if n.role != "honest")
    assert attacker.batches_rejected >= 2  # its forged batch, refused by both honest node processes
    assert len(report.feedback["passed"]) == 2 and len(report.poison.nodes) == 2
    assert [c.name for c in report.conditions] == ["without", "own", "fleet", "poisoned", "after_feedback"]
    # the same prompts over another transport: every answer replayed, and the same accuracies
    assert report.config["answers"]["generated"] == 0 and report.config["answers"]["from_cache"] > 0
    # the same lessons recalled first (a condition answered before a lesson arrived shows here), then the same answers
    recalled = [(c.name, c.coverage, c.from_attackers) for c in report.conditions]
    assert recalled == [(c.name, c.coverage, c.from_attackers) for c in in_process.conditions]
    assert [c.accuracy for c in report.conditions] == [c.accuracy for c in in_process.conditions]
    pids = [p.read_text().strip() for p in (tmp_path / "nats").glob("*.pid")]
    assert not any(pid and _alive(int(pid)) for pid in pids)  # the cluster is down


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_dso_demo_defaults_are_the_demo_configs():
    """`make demo` runs `dso demo`: a default changed in one place only (the CLI kept 10 feedback
    tasks when DemoConfig went to 20) would make the command and the Python API run different demos."""
    from dataclasses import fields

    from dsonet.cli.demo import demo
    from dsonet.demo import DemoConfig

    config = DemoConfig()
    names = {f.name for f in fields(DemoConfig)}
    shared = {p.name: p.default for p in demo.params if p.name in names and not getattr(p, "is_flag", False)}
    assert len(shared) >= 10
    assert {k: v for k, v in shared.items() if v is not None and v != getattr(config, k)} == {}
