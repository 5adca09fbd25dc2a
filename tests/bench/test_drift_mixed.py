"""`dso bench learn --family drift --mixed`: its rows and targets, the poisoner's aim, and one fleet of the
quick plan on real nodes, the real sandboxes of both environments and the real embedded 0.5B."""

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from dsonet.bench import drift_mixed
from dsonet.bench.drift_mixed_report import summarise
from dsonet.learn import drift
from dsonet.learn.sandbox import REPO_DRIFT_PYTHON
from dsonet.scope import Probe, Scope

needs_envs = pytest.mark.skipif(not (REPO_DRIFT_PYTHON.exists() and drift_mixed.OLD_PYTHON.exists()),
                                reason=".venv-drift or .venv-drift-old is missing: `make install` builds them")
OLD_CLASSES = json.loads((Path(__file__).parents[1] / "learn" / "data" / "drift_old.json").read_text())


def _fleet(correct: dict, nodes: list[dict], wrong: dict) -> dict:
    items = [{"id": f"i{k}", "fact": "f", "class": "old_form_only" if k < 4 else "controls_hold"} for k in range(5)]
    return {"items": items, "correct": correct, "nodes": nodes, "wrong_scope": wrong}


def test_rows_pair_the_scoped_fleet_with_the_unscoped_one_and_judge_the_targets():
    none = {"new": [0, 0, 0, 0, 1], "old": [0, 0, 0, 0, 1]}
    scoped = _fleet({"without": none, "fleet": {"new": [1, 1, 1, 1, 1], "old": [1, 1, 1, 1, 1]},
                     "poisoned": none, "after_feedback": none},
                    [{"env": e, "honest_signers_hidden": 0, "poisoner_hidden": True, "poison_rows_hidden": 1.0}
                     for e in ("new", "new", "old", "old")],
                    {"new": [0] * 5, "old": [0] * 5})
    unscoped = _fleet({"fleet": {"new": [1, 1, 1, 1, 1], "old": [0, 0, 1, 0, 1]}, "poisoned": none,
                       "after_feedback": none},
                      [{"env": e, "honest_signers_hidden": int(e == "old"), "poisoner_hidden": True,
                        "poison_rows_hidden": 1.0} for e in ("new", "new", "old", "old")],
                      {"new": [0] * 5, "old": [1, 1, 0, 0, 0]})
    rows, targets = summarise([{"seed": 0, "scoped": scoped, "unscoped": unscoped}],
                              {"new": ["numpy==2.4.6"], "old": ["numpy==1.26.4"]})
    new, old = rows
    assert new["n_eval"] == old["n_eval"] == 4  # the control apart
    assert old["accuracy_fleet_scoped"] == 1.0 and old["accuracy_fleet_unscoped"] == 0.25
    assert old["wrong_scope_injection_rate_unscoped"] == 0.4 and old["wrong_scope_injection_rate"] == 0.0
    assert old["honest_signers_hidden_unscoped"] == 2 and old["honest_signers_hidden"] == 0
    assert old["by_class"]["controls_hold"]["n"] == 1
    assert all(t["met"] for name, t in targets.items() if not name.startswith("single"))


def test_the_poisoner_aims_a_lesson_wrong_in_each_environment_at_it():
    by_id = drift.FACTS_BY_ID
    facts = [by_id["numpy-trapz"], by_id["pandas-iteritems"], by_id["numpy-in1d"]]
    classes = {"numpy-trapz": "old_form_only", "pandas-iteritems": "new_form_only", "numpy-in1d": "either"}
    probes = {e: Probe(Scope.parse(pins), {"numpy": ("numpy",), "pandas": ("pandas",)})
              for e, pins in (("new", "numpy==2.4.6 pandas==3.1.1"), ("old", "numpy==1.26.4 pandas==2.0.3"))}
    lessons = drift_mixed.poison_lessons(facts, classes, probes, scoped=True)
    old = {t for t, s in lessons if s.get("numpy") == "1.26.4" or s.get("pandas") == "2.0.3"}
    # in the older environment: the newer one's right form where the old is right there; nothing where both are
    assert by_id["numpy-trapz"].lesson in old and by_id["pandas-iteritems"].poison in old
    assert not any("in1d" in t or "isin" in t for t in old)
    assert len(lessons) == 3 + 2
    assert all(not s for _, s in drift_mixed.poison_lessons(facts, classes, probes, scoped=False))


@needs_envs
def test_classify_finds_the_classes_the_older_environment_test_established():
    from dsonet.learn.sandbox import Sandbox

    with Sandbox(preload=drift.PRELOAD) as new, Sandbox(python=drift_mixed.OLD_PYTHON, preload=drift.PRELOAD) as old:
        found = drift_mixed.classify(new, old)
    for name in ("old_form_only", "either", "new_form_only", "controls_hold"):
        assert sorted(f for f, c in found.items() if c == name) == OLD_CLASSES[name], name


@needs_envs
@pytest.mark.slow
def test_the_quick_plan_runs_a_scoped_fleet_through_every_step_on_real_nodes(tmp_path):
    from dsonet.learn.llm import open_llm
    from dsonet.learn.sandbox import Sandbox
    from dsonet.scope import probe

    llm = open_llm(None, "qwen2.5-coder-0.5b")
    plan = replace(drift_mixed.QUICK, per_env=1, old_form_only=1, new_form_only=1, controls=0, feedback_tasks=2,
                   group_size=2, answer_tokens=24)
    with Sandbox(preload=drift.PRELOAD) as new, Sandbox(python=drift_mixed.OLD_PYTHON, preload=drift.PRELOAD) as old:
        boxes = {"new": new, "old": old}
        probes = {e: probe(str(b.python)) for e, b in boxes.items()}
        classes = {f: c for f, c in ((f, c) for c in OLD_CLASSES if not c.startswith("_") for f in OLD_CLASSES[c])}
        facts = drift_mixed.facts_in_play(plan, classes)
        out = asyncio.run(drift_mixed.run_fleet(True, llm, llm, plan, 0, tmp_path, boxes, classes, facts, probes,
                                                log=lambda _: None))
    assert [it["class"] for it in out["items"]] == ["old_form_only", "new_form_only"]
    assert set(out["correct"]) == {"without", "fleet", "poisoned", "after_feedback"}
    assert all(len(v[e]) == 2 for v in out["correct"].values() for e in ("new", "old"))
    assert [n["env"] for n in out["nodes"]] == ["new", "old"]
    assert out["wrong_scope"]["old"] == [0, 0]  # scoped searches never inject a contradicting lesson
    assert out["feedback"]["tasks_per_node"] == 2
    assert all(s for _, s in out["poison"])  # each poison lesson claims a scope


def test_a_seed_already_in_the_results_file_for_the_same_plan_and_models_is_kept(tmp_path):
    plan = replace(drift_mixed.MixedPlan(), seeds=(0, 1))
    path = tmp_path / "learn-drift-mixed.json"
    seed0 = {"seed": 0, "scoped": {"items": []}, "unscoped": {"items": []}}
    path.write_text(json.dumps({"llm": "m", "reflector": "r", "plan": {**drift_mixed.asdict(plan), "seeds": [0]},
                                "seeds": [seed0]}))
    assert drift_mixed.finished_seeds(path, plan, "m", "r") == {0: seed0}
    assert drift_mixed.finished_seeds(path, plan, "m", "another reflector") == {}
    assert drift_mixed.finished_seeds(path, replace(plan, feedback_tasks=plan.feedback_tasks + 1), "m", "r") == {}
    assert drift_mixed.finished_seeds(tmp_path / "missing.json", plan, "m", "r") == {}
