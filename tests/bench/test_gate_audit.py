"""`dso bench gate`: the learner's execution gate put to hand-checked lessons, on the real sandbox and
the real encoder, with a scripted agent (the subject is the audit, not the model): it writes a fact's
current line only when that fact's correct lesson is in its system message, the stale line otherwise."""

import json
from dataclasses import replace

import pytest

from dsonet.bench import gate_audit
from dsonet.learn.chat import Completion
from dsonet.learn.drift import FACTS, instances
from dsonet.learn.sandbox import REPO_DRIFT_PYTHON
from dsonet.sim.scenario import DriftPlan, facts_for

needs_env = pytest.mark.skipif(not REPO_DRIFT_PYTHON.exists(), reason=".venv-drift is missing: `make install` builds it")


class LessonFollower:
    """Answers an instance with its reference line where the system message holds its fact's correct
    lesson, else with the stale line (or the reference, for a control: its API did not change)."""

    name = "lesson-follower"

    def __init__(self, plan: DriftPlan):
        self.lessons = {f.id: f.lesson for f in FACTS}
        self.by_question = {}
        for fact in facts_for(plan):
            for task in instances(fact, 20):
                self.by_question[task.question] = task

    def generate(self, chats, n=1, temperature=0.0, max_tokens=48, seed=None):
        out = []
        for chat in chats:
            system = chat[0]["content"] if chat[0]["role"] == "system" else ""
            task = next(t for q, t in self.by_question.items() if q in chat[-1]["content"])
            knows = self.lessons[task.entry["fact"]] in system or task.entry["stale"] is None
            line = task.entry["reference"] if knows else task.entry["stale"]
            out.append(Completion((f"```python\n{line}\n```",) * n, 10, 5 * n))
        return out


@needs_env
def test_the_gate_keeps_a_lesson_that_fixes_its_fact_and_refuses_one_that_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run's bench/results/ lands here
    plan = replace(DriftPlan(), facts=3)
    lines = []
    result = json.loads(gate_audit.run(LessonFollower(plan), plan, quick=True, log=lines.append).read_text())
    assert [r["fact"] for r in result["facts"]] == [f.id for f in facts_for(plan) if f.poison]
    # the follower writes the current line only under the correct lesson: each fixes its fact, no poison does
    assert result["counts"] == {"correct": {"kept": 3, "probation": 0, "n": 3}, "wrong": {"kept": 0, "probation": 0, "n": 3}}
    assert result["correct_kept"] == 1.0 and result["wrong_kept"] == 0.0
    assert any("kept by the gate" in line for line in lines)


@needs_env
def test_with_probation_a_lesson_that_changes_nothing_is_kept_on_probation_not_refused(tmp_path, monkeypatch):
    """The follower ignores a wrong lesson (it writes the stale line with it as without): a tie, which
    probation lets in for outcomes to settle; the correct lessons still fix their facts and are kept."""
    monkeypatch.chdir(tmp_path)
    plan = replace(DriftPlan(), facts=3, probation=True)
    path = gate_audit.run(LessonFollower(plan), plan, quick=True, log=lambda _: None)
    result = json.loads(path.read_text())
    assert path.name == "drift-gate-audit-probation-quick.json"
    assert result["counts"] == {"correct": {"kept": 3, "probation": 0, "n": 3}, "wrong": {"kept": 0, "probation": 3, "n": 3}}
