"""`dso bench agents`: the agent loop's traffic through a real `dso proxy --learn` (real library, encoder,
learner and sandbox; the upstream is an instrument that answers a drift task's stale line, then its
reference), the rows' metrics, and the plan's sizes. The whole bench on the real model takes minutes
even at its smallest (node processes on NATS, the 0.5B answering every try): its evidence is
bench/results/agents-smoke.json, not a test."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi import FastAPI, Request

from dsonet.bench import agents as bench_agents
from dsonet.bench.agent_loop import PASSED, Agent, RunRecord, Try, environment_says, locked
from dsonet.bench.agents_fleet import CountingLearner, episodes_in, held_out
from dsonet.bench.agents_report import CONDITIONS, row
from dsonet.bench.proxy import Served
from dsonet.encoders import default_encoder
from dsonet.learn import drift
from dsonet.learn.drift import Check
from dsonet.learn.sandbox import REPO_DRIFT_PYTHON, Sandbox
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import create_app
from dsonet.sim.scenario import make_splits

needs_env = pytest.mark.skipif(not REPO_DRIFT_PYTHON.exists(),
                               reason=".venv-drift is missing: `make install` builds it")
TRAPZ = drift.instances(drift.FACTS_BY_ID["numpy-trapz"], 2, seed=0)


def test_the_environment_says_an_error_line_an_assertion_about_r_or_that_it_passed():
    assert environment_says(Check(False, "AttributeError: module 'numpy' has no attribute 'trapz'", "")) == \
        "AttributeError: module 'numpy' has no attribute 'trapz'"
    # a wrong value is a failure the proxy must see as one: as a test harness says it
    assert environment_says(Check(False, "r = 3.5, expected a different value", "")) == \
        "AssertionError: r = 3.5, expected a different value"
    assert environment_says(Check(True, "r is correct", "")) == PASSED


def stale_then_reference(task) -> FastAPI:
    """Answers the task's stale line, then its reference, then (the closing request) one word; keeps each body."""
    return instrument([f"```python\n{task.entry['stale']}\n```", f"```python\n{task.entry['reference']}\n```", "Done"])


def instrument(replies: list[str]) -> FastAPI:
    """An upstream that answers ``replies`` in turn (the last again once they run out); keeps each body."""
    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        app.state.requests.append(await request.json())
        text = replies[min(len(app.state.requests), len(replies)) - 1]
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
    return app


@needs_env
def test_a_run_that_fails_then_fixes_is_one_lesson_learned_once_from_what_the_proxy_saw(tmp_path):
    task = TRAPZ[0]
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=default_encoder()))
    learner = CountingLearner(memory)
    coder = stale_then_reference(task)
    with Sandbox(preload=("numpy",)) as box, Served(coder) as upstream, \
            Served(create_app(memory, f"{upstream.url}/v1", learner=learner)) as proxy:
        agent = Agent(0, f"{proxy.url}/v1", "m", locked(lambda t, r: drift.check(box, t, r)), tries=3)
        record = agent.solve(task)
        agent.close()
    assert [t.passed for t in record.tries] == [False, True] and not record.first_try and record.solved
    assert record.tries[0].said.startswith("AttributeError:") and record.tokens == 220 and record.close_tokens == 110
    # three requests, each resending the run so far: the episode is learned once, as the scorer counts it
    assert learner.counts() == {"requests": 3, "episodes": 1, "paired": 0, "lessons": 1, "outcomes": 0}
    assert episodes_in([record, record]) == 1
    (lesson,) = memory.all()
    assert "np.trapezoid" in lesson.text and "np.trapz" in lesson.text
    # the retry was sampled and the closing request asked for one token; the first try was greedy
    bodies = coder.state.requests
    assert [b["temperature"] for b in bodies] == [0.0, 0.7, 0.0] and bodies[-1]["max_tokens"] == 1
    assert bodies[-1]["messages"][-1]["content"] == PASSED
    memory.close()


@needs_env
def test_a_team_behind_one_learner_pairs_the_small_models_wrong_value_with_the_large_ones_code_that_ran(tmp_path):
    """`--team`: two agents on two upstreams, their proxies sharing the node's learner. The small one's wrong value
    names no fix and no run of its own fixes it; the large one writes the task's line at once and has nothing to
    learn alone. Together they are an episode, and the lesson is the large one's call."""
    task = drift.instances(drift.FACTS_BY_ID["scipy-linalg-tril"], 1, seed=0)[0]
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=default_encoder()))
    learner = CountingLearner(memory)
    small = instrument(["```python\nr = M.copy()\n```"] * 3 + ["Done"])
    large = instrument([f"```python\n{task.entry['reference']}\n```", "Done"])
    with Sandbox(preload=("numpy", "scipy")) as box, Served(small) as up_small, Served(large) as up_large, \
            Served(create_app(memory, f"{up_small.url}/v1", learner=learner)) as px_small, \
            Served(create_app(memory, f"{up_large.url}/v1", learner=learner)) as px_large:
        check = locked(lambda t, r: drift.check(box, t, r))
        agents = [Agent(0, f"{px.url}/v1", "m", check, tries=3) for px in (px_small, px_large)]
        records = [a.solve(task) for a in agents]
        for a in agents:
            a.close()
    assert [r.solved for r in records] == [False, True]
    assert records[0].tries[0].said.startswith("AssertionError: r = ")
    assert learner.counts() | {"requests": 0} == {"requests": 0, "episodes": 0, "paired": 1, "lessons": 1, "outcomes": 0}
    (lesson,) = memory.all()
    assert lesson.text == ("When computing the lower triangle of the square matrix M (entries above the main diagonal "
                           "set to zero), use np.tril(M).")
    memory.close()


def test_team_needs_a_second_model_and_its_row_names_both():
    result = CliRunner().invoke(bench_agents.cli, ["--team"])
    assert result.exit_code == 2 and "--team needs a --practice-model" in result.output
    plan = bench_agents.AgentsPlan(model="s", practice_model="l", team=True)
    assert (plan.learner(), plan.practised_by()) == ("l", "l+s")
    assert bench_agents.AgentsPlan(model="s", practice_model="l").practised_by() == "l"


def _record(task_id: str, passed: list[bool], tokens: int = 100, lessons: tuple = ()) -> RunRecord:
    return RunRecord(task_id, 0, tuple(Try(p, "", tokens, lessons) for p in passed), 5, ())


def test_a_row_counts_first_tries_solved_runs_and_tokens_per_solved_task_over_the_change_tasks():
    passes = {"none": [[False, False, False], [True], [False, True], [True]],
              "fleet": [[True], [True], [False, True], [True]]}
    records = {c: [_record(f"t{i}", p, lessons=("p1",) if c == "fleet" and i == 0 else ())
                   for i, p in enumerate(passes.get(c, passes["none"]))] for c in CONDITIONS}
    control = np.array([False, False, False, True])
    out = row("loop", "m", 3, records, control, poison_ids={"p1"})
    assert out["n_eval"] == 3 and out["n_control"] == 1
    assert out["first_try_none"] == pytest.approx(1 / 3, abs=1e-4)
    assert out["first_try_fleet"] == pytest.approx(2 / 3, abs=1e-4)
    assert out["solved_within_3_none"] == pytest.approx(2 / 3, abs=1e-4) and out["solved_within_3_fleet"] == 1.0
    # none: 3 + 1 + 2 tries of 100 tokens for 2 solved; fleet: 1 + 1 + 2 for 3 solved
    assert out["tokens_per_solved_none"] == 300 and out["tokens_per_solved_fleet"] == pytest.approx(400 / 3, abs=1e-3)
    assert out["tries_per_solved_fleet"] == pytest.approx(4 / 3, abs=1e-3)
    assert out["ci95_first_try_fleet"][1] > 0 and out["ci95_first_try_fleet_vs_own"][0] >= 0
    assert out["poison_in_first_prompt"]["fleet"] == 0.25 and out["controls"]["none"]["first_try"] == 1.0
    for key in ("first_try_own", "solved_within_3_poisoned_after_feedback", "ci95_solved_within_3_fleet"):
        assert key in out


class _Echo:
    """An agent that records which agent solved a task (the bench's own would ask a model)."""

    def __init__(self, index: int):
        self.index = index

    def solve(self, task) -> RunRecord:
        return RunRecord(task.id, self.index, (), 0, ())


def test_held_out_task_i_is_solved_by_agent_i_mod_n_and_comes_back_in_the_tasks_order():
    tasks = drift.instances(drift.FACTS_BY_ID["numpy-trapz"], 7, seed=0)
    records = held_out([_Echo(k) for k in range(3)], tasks, "test")
    assert [r.task_id for r in records] == [t.id for t in tasks]
    assert [r.agent for r in records] == [i % 3 for i in range(7)]


def test_the_default_plan_is_full_size_and_a_small_one_keeps_every_agent_in_feedback():
    full = bench_agents.AgentsPlan()
    assert full.agents >= 4 and full.tries == 3
    splits = make_splits(full.drift(), 0)
    assert sum(not drift.FACTS_BY_ID[t.entry["fact"]].control for t in splits.held_out) >= max(100, full.n_eval)
    small = bench_agents.AgentsPlan(facts=2, n_eval=4, feedback_tasks=9)
    splits = make_splits(small.drift(), 0)
    jobs = bench_agents.feedback_jobs(splits, small.agents, small.feedback_tasks)
    assert [len(j) for j in jobs] == [9] * small.agents  # the pool wraps round when it is smaller
    assert not {t.id for t in splits.held_out} & {t.id for j in jobs for t in j}


def test_combine_gathers_one_row_per_framework_and_model_and_refuses_two_for_one(tmp_path, monkeypatch):
    def results(name, framework, model, first_try, **practice):
        (tmp_path / "bench" / "results" / f"{name}.json").write_text(json.dumps(
            {"plan": {"model": model}, "rows": [{"framework": framework, "model": model, "first_try_fleet": first_try,
                                                 **practice}], "machine": {"cores": 2}}))

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench" / "results").mkdir(parents=True)
    results("a", "loop", "m1", 0.5)
    results("b", "smolagents", "m2", 0.25)
    results("c", "loop", "m1", 0.75)
    results("d", "loop", "m1", 0.6, practice_model="m2")  # m1 measured, m2 learned with: a row of its own
    out = CliRunner().invoke(bench_agents.cli, ["--combine", "a,b,d"])
    assert out.exit_code == 0, out.output
    data = json.loads((tmp_path / "bench" / "results" / "agents.json").read_text())
    assert [(r["framework"], r["model"], r["first_try_fleet"], r["source"]) for r in data["rows"]] == \
        [("loop", "m1", 0.5, "a"), ("smolagents", "m2", 0.25, "b"), ("loop", "m1", 0.6, "d")]
    assert data["combined_from"] == ["a", "b", "d"] and data["rows"][1]["plan"] == {"model": "m2"}
    refused = CliRunner().invoke(bench_agents.cli, ["--combine", "a,c", "--out", "both"])
    assert refused.exit_code == 2 and "c and a both hold a row for framework 'loop', model 'm1'" in refused.output
    missing = CliRunner().invoke(bench_agents.cli, ["--combine", "a,zzz", "--out", "both"])
    assert missing.exit_code == 2 and "no zzz.json" in missing.output
    assert not (tmp_path / "bench" / "results" / "both.json").exists()


def test_a_phase_shares_the_benchs_threads_among_the_models_it_runs(monkeypatch):
    """The team's practice runs both models at once, a held-out phase only the agents' one: it then gets the
    core the other model leaves (one idled there before)."""
    class Threads:  # records what the bench asks of a served model
        threads = None

        def set_threads(self, n):
            self.threads = n

    monkeypatch.setattr(bench_agents, "default_threads", lambda: 1)  # a 2-core machine
    small, large = Threads(), Threads()
    cores = bench_agents.Cores({"0.5b": small, "1.5b": large})
    cores.give("0.5b")
    assert (small.threads, large.threads) == (2, None)
    cores.give("1.5b", "0.5b")
    assert (small.threads, large.threads) == (1, 1)
    cores.give("1.5b")
    assert (small.threads, large.threads) == (1, 2)
