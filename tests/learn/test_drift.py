"""The drift task family: its facts, instances, answers' extraction and the sandboxed check."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from dsonet.learn import drift
from dsonet.learn.code_lessons import refutes
from dsonet.learn.drift import FACTS, VERSIONS, Check, check, drift_splits, drift_taskset, extract_code, instances

ROOT = Path(__file__).resolve().parents[2]
DRIFT_PYTHON = ROOT / ".venv-drift" / "bin" / "python"
ERRORS_ONLY = {"removed", "renamed", "argument"}  # their old form must raise; a default/behaviour may just differ


@pytest.fixture(scope="module")
def sandbox():
    if not DRIFT_PYTHON.exists():
        pytest.skip(f"{DRIFT_PYTHON} is missing: `make install` builds the drift environment from drift.lock")
    from dsonet.learn.sandbox import Sandbox, SandboxError

    try:
        box = Sandbox(python=DRIFT_PYTHON, preload=drift.PRELOAD)
    except SandboxError as exc:
        pytest.skip(f"the sandbox cannot start here: {exc}")
    with box:
        yield box


def test_facts_file_has_40_cited_changes_over_five_libraries_and_15_controls():
    changes = [f for f in FACTS if not f.control]
    controls = [f for f in FACTS if f.control]
    per_library = Counter(f.library for f in changes)
    assert len(changes) >= 40 and len(controls) >= 15
    assert {"numpy", "scipy", "scikit-learn", "networkx", "pandas"} <= {lib for lib, n in per_library.items() if n >= 5}
    for f in FACTS:
        assert f.library in f.changelog.lower(), f"{f.id}: the changelog entry does not name {f.library}"
        assert re.search(r"\d+\.\d+", f.changelog), f"{f.id}: the changelog entry names no release"
        assert f.control or (f.stale and f.poison), f.id
        assert len(f.lesson.split()) <= 32 and f.lesson.startswith("When "), f.id


def test_a_poison_that_names_the_new_api_is_refused_at_load(tmp_path):
    """A poison like "call np.trapz(y, x); np.trapezoid does not exist" shows a small model the name it
    needs: before this rule, the 0.5B answered 10 facts better with the poison alone than with nothing."""
    text = drift.FACTS_PATH.read_text()
    leaky = text.replace('call np.trapz(y, x)."', 'call np.trapz(y, x); np.trapezoid does not exist."')
    assert leaky != text
    (path := tmp_path / "facts.toml").write_text(leaky)
    with pytest.raises(drift.DriftError, match=r"numpy-trapz.*the poison names \['trapezoid'\]"):
        drift.load_facts(path)


def test_pinned_versions_are_those_of_drift_lock():
    pins = dict(line.split("==") for line in (ROOT / "drift.lock").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    for library in ("numpy", "scipy", "scikit-learn", "networkx", "pandas"):
        assert VERSIONS[library] == pins[library], library


def test_instances_of_a_fact_are_distinct_and_splits_share_nothing():
    for fact in FACTS:
        tasks = instances(fact, 25, seed=3)
        assert len({t.id for t in tasks}) == 25
        assert len({(t.entry["setup"], t.entry["reference"]) for t in tasks}) == 25, fact.id
    train, val, test = drift_splits([4, 2, 4], seed=1)
    assert (len(train), len(val), len(test)) == (4 * len(FACTS), 2 * len(FACTS), 4 * len(FACTS))
    keys = [{(t.entry["setup"], t.entry["reference"]) for t in split} for split in (train, val, test)]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    assert drift_splits([4, 2, 4], seed=1)[2][0].question == test[0].question  # same seed, same instances


def _names(code: str) -> set[str]:
    """Attributes, called names, keywords and string constants of a line: what an API is called by."""
    out = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


def test_no_question_names_its_facts_new_api():
    for fact in FACTS:
        for task in instances(fact, 10, seed=5):
            asked = task.question.rsplit("```", 1)[-1]  # the task sentence, after the setup code
            new = set(fact.hides)
            if not fact.control:
                new |= _names(task.entry["reference"]) - _names(task.entry["stale"])
            shown = {n for n in new if re.search(r"(?<![\w.])" + re.escape(n) + r"(?!\w)", asked)}
            assert not shown, f"{task.id}: the task text names {shown}: {asked!r}"


def test_extract_code_strips_fences_prose_and_restated_setup():
    setup = "import numpy as np\nys = np.array([1.0, 2.0])"
    assert extract_code("```python\nr = np.trapezoid(ys)\n```", setup) == "r = np.trapezoid(ys)"
    assert extract_code("Sure! Here it is:\n`r = np.trapezoid(ys)`\nThis integrates ys.", setup) == "r = np.trapezoid(ys)"
    restated = "```python\nimport numpy as np\nys = np.array([1.0, 2.0])\nr = ys.sum()\n```"
    assert extract_code(restated, setup) == "r = ys.sum()"
    elided = "ys = np.array([...])\nfrom scipy import integrate\nr = integrate.simpson(ys)"
    assert extract_code(elided, setup) == "from scipy import integrate\nr = integrate.simpson(ys)"
    assert extract_code("Answer: r = len(ys)", setup) == "r = len(ys)"
    two_blocks = "Given:\n```python\nys = np.array([1.0, 2.0])\n```\nthen\n```python\nr = ys.max()\n```"
    assert extract_code(two_blocks, setup) == "r = ys.max()"
    assert extract_code("I cannot do that.", setup) == ""


def test_the_drift_environment_runs_the_pinned_releases(sandbox):
    code = "import numpy, scipy, sklearn, networkx, pandas\n" \
           "r = [m.__version__ for m in (numpy, scipy, sklearn, networkx, pandas)]"
    res = sandbox.run(code)
    assert res.ok, res.error
    assert res.value == [VERSIONS[lib] for lib in ("numpy", "scipy", "scikit-learn", "networkx", "pandas")]


def _sweep(sandbox, per_fact: int, seed: int) -> None:
    for fact in FACTS:
        for task in instances(fact, per_fact, seed=seed):
            ok = check(sandbox, task, task.entry["reference"])
            assert ok.passed, f"{task.id}: the reference fails its own check: {ok.feedback}"
            if fact.control:
                continue
            stale = check(sandbox, task, f"```python\n{task.entry['stale']}\n```")
            assert not stale.passed, f"{task.id}: the stale line {task.entry['stale']!r} passes"
            if fact.change in ERRORS_ONLY:
                assert "expected a different value" not in stale.feedback, f"{task.id}: the stale line ran: {stale.feedback}"


def test_every_reference_passes_its_check_and_every_stale_line_fails(sandbox):
    _sweep(sandbox, per_fact=1, seed=11)


@pytest.mark.slow
def test_every_reference_passes_and_every_stale_line_fails_on_three_more_instances(sandbox):
    _sweep(sandbox, per_fact=3, seed=12)  # ~750 sandbox runs: 28 s measured on the shared 2-core machine at load 6


def test_the_stale_lines_errors_refute_most_poison_lessons_and_no_correct_lesson(sandbox):
    """The feedback evidence the drift bench's agents report (`code_lessons.refutes`): following the
    poison into the environment's refusal refutes it; the hand-written lesson, never."""
    refuted = []
    for fact in (f for f in FACTS if not f.control):
        task = instances(fact, 1, seed=13)[0]
        stale = check(sandbox, task, task.entry["stale"])
        assert not refutes(stale.feedback, task.entry["stale"], fact.lesson), f"{fact.id}: {stale.feedback}"
        refuted.append(refutes(stale.feedback, task.entry["stale"], fact.poison))
    assert sum(refuted) >= 50, f"{sum(refuted)} of {len(refuted)} poison lessons refuted by their stale line's error"


def test_check_feedback_names_the_error_or_the_wrong_value_but_never_the_reference(sandbox):
    task = instances(drift.FACTS_BY_ID["numpy-trapz"], 1, seed=2)[0]
    expected = drift.reference_value(sandbox, task)
    removed = check(sandbox, task, task.entry["stale"])
    assert removed == Check(False, "AttributeError: module 'numpy' has no attribute 'trapz'", task.entry["stale"])
    wrong = check(sandbox, task, "r = 0.5")
    assert not wrong.passed and wrong.feedback == "r = 0.5, expected a different value"
    assert str(expected) not in wrong.feedback and str(expected) not in removed.feedback
    assert check(sandbox, task, "x = 1").feedback == "ran, but r was not assigned"
    taskset = drift_taskset([task], sandbox)
    assert taskset.verify(task, f"```\n{task.entry['reference']}\n```") == 1.0
    assert taskset.verify(task, task.entry["stale"]) == 0.0
