"""`dso bench learn --family drift`: its rows, and one whole seed of the scenario shrunk to one change and one control, on
real nodes, the real sandbox and the real embedded LLM (the 0.5B in every role, tiny budgets: this checks
the plumbing, every condition answered, the poison published and judged, outcomes reported)."""

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from dsonet.bench import drift as bench_drift
from dsonet.learn.sandbox import REPO_DRIFT_PYTHON
from dsonet.sim.scenario import make_splits

needs_env = pytest.mark.skipif(not REPO_DRIFT_PYTHON.exists(), reason=".venv-drift is missing: `make install` builds it")


def test_a_row_pools_seeds_and_reports_every_condition():
    items = [{"id": f"i{k}", "fact": "numpy-trapz" if k < 4 else "numpy-ctrl", "library": "numpy",
              "control": k >= 4} for k in range(6)]
    correct = {c: [0, 0, 1, 0, 1, 1] for c in bench_drift.CONDITIONS}
    correct["fleet"] = [1, 1, 1, 0, 1, 1]
    correct["reference"] = [1, 1, 1, 1, 1, 1]
    seed = {"items": items, "correct": correct, "injected": {c: [1] * 6 for c in bench_drift.CONDITIONS},
            "facts": {"poison_rows_hidden": 1.0, "honest_rows_hidden": 0.0, "lesson_tokens": 20.0, "wall_s": 1.0,
                      "feedback": {"poisoners_convicted_after": [[12], [31]]}}}
    row = bench_drift.summarise("m", [seed, seed])
    assert row["feedback_tasks_to_convict"] == 31  # the most any node needed
    never = {**seed, "facts": {**seed["facts"], "feedback": {"poisoners_convicted_after": [[12], [None]]}}}
    assert bench_drift.summarise("m", [seed, never])["feedback_tasks_to_convict"] is None
    assert row["n_eval"] == 4 and row["n_answers"] == 8 and row["n_control"] == 2 and row["seeds"] == 2
    assert row["accuracy_without"] == 0.25 and row["accuracy_fleet"] == 0.75 and row["accuracy_reference"] == 1.0
    assert row["recovered"] == pytest.approx(2 / 3, abs=1e-3) and row["accuracy_control_without"] == 1.0
    assert row["by_library"]["numpy"]["n_eval"] == 4 and row["per_fact"]["numpy-trapz"]["n"] == 4
    for c in bench_drift.CONDITIONS[1:]:
        assert f"ci95_{'with' if c == 'own' else c}" in row


def test_a_seed_repeated_is_not_more_evidence_than_the_seed_alone():
    """Every seed answers the same held-out items: pooling a seed with itself must leave every interval
    and p as one seed gives them (resampling answers instead of items would narrow them)."""
    items = [{"id": f"i{k}", "fact": "numpy-trapz", "library": "numpy", "control": False} for k in range(12)]
    correct = {c: [0] * 12 for c in bench_drift.CONDITIONS}
    correct["fleet"] = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    seed = {"items": items, "correct": correct, "injected": {c: [1] * 12 for c in bench_drift.CONDITIONS},
            "facts": {"poison_rows_hidden": 1.0, "honest_rows_hidden": 0.0, "lesson_tokens": 20.0, "wall_s": 1.0,
                      "feedback": {}}}
    one, three = bench_drift.summarise("m", [seed]), bench_drift.summarise("m", [seed] * 3)
    for key in ("ci95_fleet", "wilson", "p_mcnemar", "ci95_fleet_vs_own", "by_library"):
        assert one[key] == three[key], key
    assert one["ci95_fleet"][0] == 0.0  # 3 gains in 12 items: not yet clear of 0, however many seeds repeat it


@needs_env
@pytest.mark.slow
def test_one_seed_of_the_scenario_runs_every_condition_on_real_nodes(tmp_path):
    from dsonet.learn.llm import open_llm

    llm = open_llm(None, "qwen2.5-coder-0.5b")
    plan = replace(bench_drift.QUICK, agents=1, other_agents=1, facts=1, train_per_fact=1, held_out_per_fact=1,
                   held_out_per_control=1, feedback_tasks=1, group_size=2, candidates=1, answer_tokens=24)
    out = asyncio.run(bench_drift.run_seed(llm, llm, llm, plan, 0, tmp_path, log=lambda _: None))
    n = len(out["items"])
    assert n == 1 + 1 and set(out["correct"]) == set(bench_drift.CONDITIONS)
    assert all(len(v) == n for v in out["correct"].values())
    # the reference lesson is in every prompt of its condition; the poison in every change item's
    assert np.all(out["injected"]["reference"]) and sum(out["injected"]["poison_only"]) == 1
    facts = out["facts"]
    assert len(facts["poison"]) == 1 and facts["feedback"]["tasks_per_node"] == 1
    assert len(facts["feedback"]["poisoners_convicted_after"]) == 2  # per honest node: after how many tasks, or None
    assert 0.0 <= facts["poison_rows_hidden"] <= 1.0 and len(facts["poison_rows_hidden_per_node"]) == 2
    trained = [len(part) for part in make_splits(plan, 0).train]
    assert [node["rollouts"] for node in facts["learning"]] == [plan.group_size * t for t in trained]


def test_a_plan_with_probation_keeps_its_own_result_files(tmp_path, monkeypatch):
    """`--probation` learns other lessons: its per-seed files are neither pooled into learn-drift.json nor
    pooled from the plain plan's, and its nodes live in a folder of their own."""
    monkeypatch.setattr(bench_drift, "RESULTS_DIR", tmp_path)
    names = [bench_drift.seed_name("qwen2.5-coder-0.5b", 0), bench_drift.seed_name("qwen2.5-coder-0.5b", 0, True),
             bench_drift.seed_name("qwen2.5-coder-1.5b", 1, True)]
    for name in names:
        (tmp_path / f"{name}.json").write_text("{}")
    assert names[1] == "learn-drift-probation-qwen2.5-coder-0.5b-seed0"
    assert [p.stem for p in bench_drift.seed_files()] == [names[0]]
    assert [p.stem for p in bench_drift.seed_files(probation=True)] == [names[1], names[2]]
    assert [p.stem for p in bench_drift.seed_files("qwen2.5-coder-1.5b", probation=True)] == [names[2]]


def test_probation_is_refused_outside_the_drift_fleet():
    from click.testing import CliRunner

    from dsonet.cli.main import cli

    for args in (["--family", "lcm"], ["--family", "drift", "--mixed"]):
        result = CliRunner().invoke(cli, ["bench", "learn", "--probation", *args])
        assert result.exit_code == 2 and "--probation is a plan of the drift fleet" in result.output
