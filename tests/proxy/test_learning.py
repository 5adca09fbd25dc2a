"""`dso proxy --learn`: an agent's error and its fix, seen in its own traffic, become a lesson that the
next agent's request gets, and that agent's result becomes the lesson's outcome. The upstream is an
instrument that answers with scripted tool calls (the subject is the proxy); the library, its encoder
and retrieval are real."""

import json
import threading

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from dsonet.bench.agent_loop import INSTRUCTION, PASSED
from dsonet.bench.proxy import Served
from dsonet.encoders import default_encoder
from dsonet.encoders.minilm_numpy import numpy_minilm
from dsonet.learn import drift
from dsonet.learn.pairing import Pairing
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import chat_answer, create_app, responses_answer
from dsonet.proxy.learning import PROBATION, TrafficLearner

SETUP = "The code below has run (Python 3.11, numpy 2.4.6).\n```python\nimport numpy as np\nx = np.linspace(0, {n}, 11)\ny = x ** {p}\n```\n"
TASK_A = SETUP.format(n=1, p=2) + "Write one line of Python that assigns to r the integral of y over x by the trapezoidal rule."
TASK_B = SETUP.format(n=3, p=3) + "Write one line of Python that assigns to r the integral of y over x by the trapezoidal rule."
REFUSED = "Traceback (most recent call last):\nAttributeError: module 'numpy' has no attribute 'trapz'"


def recording_upstream(answer) -> FastAPI:
    """A chat completions upstream that keeps every request (``app.state.requests``) and answers each with
    ``answer(body, n)``, n its number from 1."""
    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        return answer(body, len(app.state.requests))
    return app


def scripted_coder(codes: list[str]) -> FastAPI:
    """Answers each chat completion with the next code of ``codes`` as a python tool call."""
    def answer(body: dict, n: int):
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": codes[n - 1]})}}
        if body.get("stream"):
            delta = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}]}
            return StreamingResponse(iter([_sse({"choices": [{"index": 0, "delta": delta}]})]),
                                     media_type="text/event-stream")
        return {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return recording_upstream(answer)


@pytest.fixture(scope="module")
def encoder():
    return default_encoder()


def _turn(client, messages: list[dict]):
    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)
    message = raw.parse().choices[0].message
    return raw.headers, message.model_dump(exclude_none=True)


def _result(message: dict, output: str) -> dict:
    return {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": output}


@pytest.mark.parametrize("result, uses_helped", [
    ("20.25", (1, 1)),  # the code the lesson advised ran: helped
    ("AttributeError: module 'numpy' has no attribute 'trapezoid'", (1, 0)),  # an older NumPy refused its advice: harmed
])
def test_one_agents_fix_becomes_the_next_agents_lesson_and_its_run_the_lessons_outcome(tmp_path, encoder, result,
                                                                                    uses_helped):
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    learner = TrafficLearner(memory)
    coder = scripted_coder(["r = np.trapz(y, x)", "r = np.trapezoid(y, x)", "r = np.trapezoid(y, x)",
                            "r = np.trapezoid(y, x)", "r = np.trapezoid(y, x)", "r = np.trapezoid(y, x)"])
    with Served(coder) as upstream, \
            Served(create_app(memory, f"{upstream.url}/v1", learner=learner, min_similarity=0.5)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk", max_retries=0)
        # agent A: fails, reads the error, fixes it; the proxy sees the whole run in its last request
        history = [{"role": "user", "content": TASK_A}]
        headers, first = _turn(client, history)
        assert headers["x-dso-lessons"] == ""  # nothing learned yet
        history += [first, _result(first, REFUSED)]
        _, second = _turn(client, history)
        history += [second, _result(second, "0.335")]
        _turn(client, history)
        (lesson,) = memory.all()
        assert "use np.trapezoid" in lesson.text and "not np.trapz" in lesson.text
        assert lesson.domain == "code" and lesson.confidence == pytest.approx(PROBATION)
        _turn(client, history + [{"role": "user", "content": "thanks"}])  # the run resent: the same episode, once
        (again,) = memory.all()
        assert again.id == lesson.id and (again.provenance.episodes, again.provenance.agents) == (1, 1)

        # agent B, a near task: the lesson is injected; the code it answers with comes back with its result
        headers, answer = _turn(client, [{"role": "user", "content": TASK_B}])
        assert headers["x-dso-lessons"] == lesson.id
        assert lesson.text in coder.state.requests[-1]["messages"][0]["content"]
        assert memory.library.outcomes(lesson.id) == (0, 0)
        _turn(client, [{"role": "user", "content": TASK_B}, answer, _result(answer, result)])
    assert memory.library.outcomes(lesson.id) == uses_helped
    memory.close()


def test_a_history_posted_to_episodes_is_learned_once_and_a_proxy_that_does_not_learn_says_how(tmp_path, encoder):
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    history = [{"role": "user", "content": TASK_A},
               {"role": "assistant", "content": "```python\nr = np.trapz(y, x)\n```"},
               {"role": "user", "content": REFUSED},
               {"role": "assistant", "content": "```python\nr = np.trapezoid(y, x)\n```"},
               {"role": "user", "content": "0.335"}]
    with Served(create_app(memory, "http://127.0.0.1:9/v1", learner=TrafficLearner(memory))) as proxy:
        first = httpx.post(f"{proxy.url}/v1/episodes", json={"messages": history}).json()
        again = httpx.post(f"{proxy.url}/v1/episodes", json={"messages": history}).json()
        bad = httpx.post(f"{proxy.url}/v1/episodes", json={"messages": "r = 1"})
    assert first["episodes"] == 1 and first["lessons"] == [memory.all()[0].id] and again["episodes"] == 0
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    with Served(create_app(memory, "http://127.0.0.1:9/v1")) as plain:
        refused = httpx.post(f"{plain.url}/v1/episodes", json={"messages": history})
    assert refused.status_code == 409 and "--learn" in refused.json()["error"]["message"]
    memory.close()


def test_agents_that_named_their_variable_otherwise_give_one_lesson_with_each_episode_and_agent_as_its_evidence(
        tmp_path, encoder):
    def run(var: str) -> list[dict]:
        task = f"```python\nimport numpy as np\n{var} = np.arange(1, 6)\n```\nAssign to r the cumulative product of {var}."
        return [{"role": "user", "content": task},
                {"role": "assistant", "content": f"```python\nr = np.cumproduct({var})\n```"},
                {"role": "user", "content": "AttributeError: module 'numpy' has no attribute 'cumproduct'. "
                                            "Did you mean: 'cumprod'?"},
                {"role": "assistant", "content": f"```python\nr = np.cumprod({var})\n```"},
                {"role": "user", "content": "[1, 2, 6, 24, 120]"}]

    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    learner = TrafficLearner(memory)
    first, second = learner.observe(run("a"), "Bearer sk-alice"), learner.observe(run("b"), "Bearer sk-bob")
    (lesson,) = memory.all()  # "np.cumprod(a)" and "np.cumprod(b)": one advice, one row
    assert "use np.cumprod(a) instead" in lesson.text and first.lessons == second.lessons == [lesson.id]
    assert (lesson.provenance.episodes, lesson.provenance.agents) == (2, 2)
    learner.observe(run("c"), "Bearer sk-alice")  # another episode of an agent counted already
    learner.observe(run("d"))  # and one with no key: the proxy itself, one more agent
    (lesson,) = memory.all()
    assert (lesson.provenance.episodes, lesson.provenance.agents) == (4, 3)
    memory.close()


def test_one_runs_refused_call_and_another_runs_call_that_ran_for_the_same_kind_of_task_give_a_lesson(tmp_path,
                                                                                                      encoder):
    """Neither run holds an episode of its own: one never fixed np.trapz, the other wrote np.trapezoid first."""
    never_fixed = [{"role": "user", "content": TASK_A},
                   {"role": "assistant", "content": "```python\nr = np.trapz(y, x)\n```"},
                   {"role": "user", "content": REFUSED}]
    right_first = [{"role": "user", "content": TASK_B},
                   {"role": "assistant", "content": "```python\nr = np.trapezoid(y, x)\n```"},
                   {"role": "user", "content": "20.25"}]
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    alone = TrafficLearner(memory)
    assert alone.observe(never_fixed).episodes == alone.observe(right_first).episodes == []
    learner = TrafficLearner(memory, pairing=Pairing(numpy_minilm().encode))
    assert learner.observe(never_fixed).lessons == []
    learned = learner.observe(right_first)
    (lesson,) = memory.all()
    assert learned.lessons == [lesson.id] and learned.episodes[0].fixed_task == TASK_B
    assert "use np.trapezoid(" in lesson.text and "refuses np.trapz" in lesson.text
    assert lesson.confidence == PROBATION
    assert learner.observe(right_first).episodes == learner.observe(never_fixed).episodes == []  # resent: nothing new
    memory.close()


def test_a_wrong_value_fixed_inside_one_run_gives_the_lesson_the_code_that_ran_spells_out(tmp_path, encoder):
    """A wrong value names no fix; the code that then ran for the same task is read as its reference, as a pair
    of runs of one kind is (no --reflect needed)."""
    (task,) = drift.instances(drift.FACTS_BY_ID["scipy-linalg-tril"], 1, seed=0)
    history = [{"role": "user", "content": f"{task.question}\n{INSTRUCTION}"},
               {"role": "assistant", "content": "```python\nr = M[:3, :3]\n```"},
               {"role": "user", "content": "AssertionError: r = {'ndarray': {'dtype': 'int64', 'shape': [3, 3]}}, "
                                           "expected a different value"},
               {"role": "assistant", "content": f"```python\n{task.answer}\n```"},
               {"role": "user", "content": PASSED}]
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    learner = TrafficLearner(memory)
    learned = learner.observe(history)
    (lesson,) = memory.all()
    assert learned.lessons == [lesson.id] and learned.unexplained == []
    assert lesson.text == ("When computing the lower triangle of the square matrix M (entries above the main diagonal "
                           "set to zero), use np.tril(M).")
    assert learner.observe(history).episodes == []  # resent: nothing new
    memory.close()


BROADCAST = SETUP.format(n=1, p=2) + "Write one line of Python that assigns to r the integral of y over x by the trapezoidal rule."


def reflecting_upstream(reply: str) -> FastAPI:
    """Answers the proxy's reflection with ``reply`` and an agent's request with a line of code."""
    def answer(body: dict, n: int) -> dict:
        asked = body["messages"][-1]["content"]
        content = reply if asked.startswith("Several attempts") else "```python\nr = 0\n```"
        return {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}
    return recording_upstream(answer)


@pytest.mark.parametrize("reply, kept", [
    ("When integrating samples by the trapezoidal rule with NumPy, average neighbouring values: np.diff gives "
     "one value fewer than the samples.", True),
    ("When x has 11 points, use 10 intervals.", False),  # this task's own numbers: refused, as the learner's are
])
def test_an_error_that_names_no_fix_is_put_to_the_upstream_and_its_lesson_kept_on_probation(tmp_path, encoder, reply,
                                                                                             kept):
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    history = [{"role": "user", "content": BROADCAST},
               {"role": "assistant", "content": "```python\nr = (y * np.diff(x)).sum()\n```"},
               {"role": "user", "content": "ValueError: operands could not be broadcast together with shapes (11,) (10,)"},
               {"role": "assistant", "content": "```python\nr = ((y[1:] + y[:-1]) / 2 * np.diff(x)).sum()\n```"},
               {"role": "user", "content": "0.335"}]
    upstream, learner, stored = reflecting_upstream(reply), TrafficLearner(memory), threading.Event()
    learner.reflected = lambda *args: (TrafficLearner.reflected(learner, *args), stored.set())[0]  # a spy
    with Served(upstream) as up, Served(create_app(memory, f"{up.url}/v1", learner=learner, reflect=True)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk", max_retries=0)
        client.chat.completions.create(model="qwen", messages=history)
        client.chat.completions.create(model="qwen", messages=history)  # resent: reflected on once
        assert stored.wait(30)  # in the background: the answers did not wait for it
    asked = [r for r in upstream.state.requests if r["messages"][-1]["content"].startswith("Several attempts")]
    assert len(asked) == 1 and asked[0]["model"] == "qwen" and "ValueError" in asked[0]["messages"][0]["content"]
    lessons = memory.all()
    assert [e.text for e in lessons] == ([reply] if kept else [])
    assert all(e.confidence == pytest.approx(PROBATION) and e.domain == "code" for e in lessons)
    assert all((e.provenance.episodes, e.provenance.agents) == (1, 1) for e in lessons)  # the episode reflected on
    memory.close()


def _sse(*events: dict) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def test_a_streamed_answers_tool_call_is_read_whole_once_the_stream_ends():
    args = json.dumps({"code": "r = np.trapezoid(y, x)"})
    stream = _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "tool_calls": [
                      {"index": 0, "id": "call_9", "type": "function", "function": {"name": "python", "arguments": args[:9]}}]}}]},
                  {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[9:]}}]}}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    (message,) = chat_answer(stream)
    assert message["tool_calls"] == [{"id": "call_9", "function": {"name": "python", "arguments": args}}]
    completed = {"type": "response.completed", "response": {"output": [
        {"type": "function_call", "call_id": "f1", "name": "python", "arguments": args}]}}
    (call,) = responses_answer(f"event: response.completed\ndata: {json.dumps(completed)}\n\n".encode())
    assert call["tool_calls"][0]["function"]["arguments"] == args
    assert chat_answer(b"not an answer") == [] and responses_answer(b"") == []


def test_a_streamed_answer_given_with_lessons_gets_its_outcome_from_the_runs_next_request(tmp_path, encoder):
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    lesson = memory.add("When computing the integral of y over x by the trapezoidal rule, use np.trapezoid(y, x), "
                        "not np.trapz: this environment refuses np.trapz (AttributeError).", "code")
    with Served(scripted_coder(["r = np.trapezoid(y, x)"] * 2)) as upstream, \
            Served(create_app(memory, f"{upstream.url}/v1", learner=TrafficLearner(memory), min_similarity=0.5)) as proxy:
        asked = [{"role": "user", "content": TASK_B}]
        streamed = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": asked, "stream": True})
        assert streamed.headers["x-dso-lessons"] == lesson.id
        (answer,) = chat_answer(streamed.content)  # what the client assembled from the stream
        httpx.post(f"{proxy.url}/v1/chat/completions",
                   json={"model": "m", "messages": asked + [answer, _result(answer, "20.25")]})
    assert memory.library.outcomes(lesson.id) == (1, 1)
    memory.close()


def test_code_that_ran_credits_the_lesson_it_followed_and_not_the_one_it_ignored(tmp_path, encoder):
    # crediting every injected lesson with a run's success let the drift poison earn the honest lessons' help
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=encoder))
    honest = memory.add("When computing the integral of y over x by the trapezoidal rule, use np.trapezoid(y, x), "
                        "not np.trapz: this environment refuses np.trapz (AttributeError).", "code")
    poison = memory.add("When computing the integral of y over x by the trapezoidal rule, call np.trapz(y, x).", "code")
    app = lambda url: create_app(memory, f"{url}/v1", learner=TrafficLearner(memory), min_similarity=0.5)  # noqa: E731
    with Served(scripted_coder(["r = np.trapezoid(y, x)"] * 2)) as upstream, Served(app(upstream.url)) as proxy:
        asked = [{"role": "user", "content": TASK_B}]
        first = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": asked})
        assert set(first.headers["x-dso-lessons"].split(",")) == {honest.id, poison.id}
        answer = first.json()["choices"][0]["message"]
        httpx.post(f"{proxy.url}/v1/chat/completions",
                   json={"model": "m", "messages": asked + [answer, _result(answer, "20.25")]})
    assert memory.library.outcomes(honest.id) == (1, 1) and memory.library.outcomes(poison.id) == (0, 0)
    memory.close()


def test_a_lesson_learned_from_traffic_is_scoped_to_what_the_agents_run(tmp_path):
    import sys
    from pathlib import Path

    from dsonet.scope import Probe, Scope

    sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
    from lib_helpers import HashEncoder

    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    here = Probe(Scope.parse(["numpy==2.4.6", "pandas==3.1.1", "python==3.11.7"], limit=2000), {"numpy": ("numpy",)})
    history = [{"role": "user", "content": TASK_A},
               {"role": "assistant", "content": "```python\nr = np.trapz(y, x)\n```"},
               {"role": "user", "content": REFUSED},
               {"role": "assistant", "content": "```python\nr = np.trapezoid(y, x)\n```"},
               {"role": "user", "content": "0.335"}]
    learned = TrafficLearner(memory, environment=here).observe(history)
    (exp,) = memory.all()
    assert learned.lessons == [exp.id] and exp.scope == Scope.parse(["numpy==2.4.6", "python==3.11.7"])
    memory.close()
