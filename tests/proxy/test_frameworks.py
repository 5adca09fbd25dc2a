"""Real agent frameworks through `dso proxy --learn`: their own request bodies, replayed.

The bodies in fixtures/ were recorded once, on 2026-12-03, from real runs of smolagents 1.26.0
(`CodeAgent` + `OpenAIServerModel`) and the OpenAI Agents SDK 0.24.0 (chat completions, a
`function_tool` running Python in a subprocess), unmodified and configured only by base URL, against
`dso proxy --learn` in front of `dso llm serve --model qwen2.5-coder-1.5b --threads 1`, with NumPy
2.4.6 refusing `np.trapz` and `np.cumproduct` (`record_frameworks.py` is how). Running the model in a
test is too slow (minutes a run on a CPU), so the test replays them: each recorded request body goes
through the real proxy (a real Library and the default encoder, `TrafficLearner`) to an upstream that
answers with the recorded response, whatever the proxy injected into the request.
"""

import json
from collections import deque
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request

from dsonet.bench.proxy import Served
from dsonet.encoders import default_encoder
from dsonet.learn.episodes import attempts
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import create_app
from dsonet.proxy.learning import PROBATION, TrafficLearner

FIXTURES = Path(__file__).parent / "fixtures"
TRAPZ = "AttributeError: module 'numpy' has no attribute 'trapz'"
CUMPRODUCT = "AttributeError: module 'numpy' has no attribute 'cumproduct'. Did you mean: 'cumprod'?"
# each recorded run's attempts as its last request shows them: the error line of each, None where it ran
ERRORS = {
    "smolagents-trapz": [TRAPZ, None, None, None],
    "agents-sdk-cumproduct": [CUMPRODUCT, None, None],
    "agents-sdk-cumproduct-near": [CUMPRODUCT, None, None],
}


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def replaying() -> FastAPI:
    """Answers each chat completion with the next recorded response queued in ``state.answers``."""
    app = FastAPI()
    app.state.answers, app.state.requests = deque(), []

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        app.state.requests.append(await request.json())
        return app.state.answers.popleft()
    return app


@pytest.fixture(scope="module")
def encoder():
    return default_encoder()


@pytest.fixture
def proxy(tmp_path, encoder):
    """The real proxy with a learner in front of a replaying upstream: (url, upstream app, memory, learner)."""
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    learner, upstream = TrafficLearner(memory), replaying()
    with Served(upstream) as up, Served(create_app(memory, f"{up.url}/v1", learner=learner)) as served:
        yield served.url, upstream, memory, learner
    memory.close()


def replay(proxy, run: dict, key: str | None = None) -> list[httpx.Response]:
    """Every request of ``run`` through the proxy, in order, as the framework sent it (with ``key``, its API key)."""
    url, upstream, _, _ = proxy
    upstream.state.answers.extend(call["response"] for call in run["calls"])
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return [httpx.post(f"{url}/v1/chat/completions", json=call["request"], headers=headers, timeout=60)
            for call in run["calls"]]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_recorded_request_gives_every_earlier_answers_code_with_its_result_and_error_line(name):
    calls = recorded(name)["calls"]
    for earlier, call in zip([None, *calls], calls):
        tried = attempts(call["request"]["messages"])
        assert [a.error for a in tried] == ERRORS[name][:len(tried)]
        assert all(a.result is not None for a in tried)  # each earlier answer's result came back with this one
        if earlier is not None:  # the code of the answer the proxy forwarded is the one that comes back
            (answered,) = attempts([earlier["response"]["choices"][0]["message"]])
            assert answered.code.split() == tried[-1].code.split()
    assert len(attempts(calls[-1]["request"]["messages"])) == len(ERRORS[name])


def test_smolagents_recovery_by_hand_is_one_episode_however_often_resent_and_no_rule_lesson(proxy):
    _, _, memory, learner = proxy
    run = recorded("smolagents-trapz")
    assert all(r.status_code == 200 for r in replay(proxy, run))
    replay(proxy, run)  # the whole run again: nothing new
    assert len(learner.seen) == 1
    # its fix was a formula written out by hand: the error line names no replacement, so no rule lesson
    assert memory.all() == []


def test_an_agents_sdk_recovery_is_one_lesson_on_probation_however_often_its_history_is_resent(proxy):
    _, _, memory, _ = proxy
    run = recorded("agents-sdk-cumproduct")
    replay(proxy, run)
    replay(proxy, run)  # every request resends the run so far; the whole run again adds nothing
    (lesson,) = memory.all()
    assert lesson.text == ("When your code would use np.cumproduct, use np.cumprod(a) instead: this environment "
                           "refuses np.cumproduct (AttributeError).")
    assert lesson.confidence == pytest.approx(PROBATION)
    assert (lesson.provenance.episodes, lesson.provenance.agents) == (1, 1)


def test_the_lesson_of_one_run_is_injected_into_a_near_tasks_run_whose_results_are_its_outcomes(proxy):
    _, upstream, memory, _ = proxy
    replay(proxy, recorded("agents-sdk-cumproduct"), key="sk-first-agent")
    (lesson,) = memory.all()
    uses_before = memory.library.outcomes(lesson.id)[0]
    near = replay(proxy, recorded("agents-sdk-cumproduct-near"), key="sk-second-agent")
    first = upstream.state.requests[-len(near)]
    assert near[0].headers["x-dso-lessons"] == lesson.id and lesson.text in first["messages"][0]["content"]
    # its first answer still wrote np.cumproduct (the task names it): a failure the lesson did not advise,
    # no verdict; the np.cumprod calls that followed ran, and each result came back with the next request
    assert memory.library.outcomes(lesson.id) == (uses_before + 2, uses_before + 2)
    # the near run's own recovery wrote np.cumprod(b): the same advice, more evidence (another agent's), one lesson
    (grown,) = memory.all()
    assert grown.id == lesson.id and grown.provenance.episodes >= 2 and grown.provenance.agents == 2
