"""`dso proxy` through the `openai` client, against a scripted upstream that echoes the system
message it received (the subject here is the proxy: what it injects, forwards and reports)."""

import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from dsonet.bench.proxy import Served, scripted_upstream
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import create_app
from dsonet.scope import Scope

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402

LESSON = "When a ratio is given, write both parts as multiples of one unknown"
QUESTION = LESSON  # the hash encoder is exact-match only: asking the lesson's own text retrieves it


@pytest.fixture
def memory(tmp_path):
    mem = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    mem.add(LESSON, "math.ratio")
    yield mem
    mem.close()


@pytest.fixture
def upstream():
    app = scripted_upstream()
    with Served(app) as served:
        served.app = app
        yield served


@pytest.fixture
def proxy(memory, upstream):
    with Served(create_app(memory, f"{upstream.url}/v1", max_body=64 * 1024, min_similarity=0.5)) as served:
        yield served


def _client(proxy, key="sk-client"):
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


def test_chat_completion_gets_the_lessons_in_the_system_message_and_names_them(proxy, upstream, memory):
    raw = _client(proxy).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "system", "content": "You are terse."}, {"role": "user", "content": QUESTION}])
    answer = raw.parse().choices[0].message.content
    assert answer.startswith("You are terse.") and LESSON in answer  # the upstream saw one amended system message
    assert "not instructions" in answer  # quoted as notes from other agents (the learner's wording)
    sent = upstream.app.state.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user"] and sent["messages"][1]["content"] == QUESTION
    lesson_id = memory.library.all()[0].id
    assert raw.headers["x-dso-lessons"] == lesson_id and raw.headers["x-dso-retrieval-id"]
    assert raw.headers["x-dso-threshold"] == "0.5000" and float(raw.headers["x-dso-best-score"]) == pytest.approx(1, abs=1e-3)
    assert "Authorization" not in sent  # body untouched otherwise


def test_without_a_system_message_one_is_added_and_unmatched_questions_get_nothing(proxy, upstream):
    client = _client(proxy)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    assert LESSON in answer.choices[0].message.content
    assert upstream.app.state.requests[-1]["messages"][0]["role"] == "system"
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "How do I reverse a linked list?"}])
    assert raw.headers["x-dso-lessons"] == "" and "x-dso-retrieval-id" not in raw.headers
    assert float(raw.headers["x-dso-best-score"]) < float(raw.headers["x-dso-threshold"]) == 0.5  # how near it came
    assert [m["role"] for m in upstream.app.state.requests[-1]["messages"]] == ["user"]


def test_streamed_chat_completion_passes_through_chunk_by_chunk(proxy):
    with _client(proxy).chat.completions.with_streaming_response.create(
            model="m", stream=True, messages=[{"role": "user", "content": QUESTION}]) as raw:
        assert raw.headers["x-dso-lessons"]
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse())
    assert LESSON in text


def test_responses_api_gets_the_lessons_in_instructions_streaming_and_not(proxy, upstream):
    client = _client(proxy)
    reply = client.responses.create(model="m", instructions="Be brief.", input=QUESTION)
    assert reply.output_text.startswith("Be brief.") and LESSON in reply.output_text
    items = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    events = list(client.responses.create(model="m", input=items, stream=True))
    assert events[-1].type == "response.completed" and LESSON in events[-1].response.output_text
    assert upstream.app.state.requests[-1]["input"] == items


def test_outcome_is_recorded_once_for_the_lessons_of_that_response(proxy, memory):
    raw = _client(proxy).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": QUESTION}])
    rid = raw.headers["x-dso-retrieval-id"]
    first = httpx.post(f"{proxy.url}/v1/outcomes", json={"retrieval_id": rid, "helped": False})
    again = httpx.post(f"{proxy.url}/v1/outcomes", json={"retrieval_id": rid, "helped": True})
    assert first.json()["recorded"] == 1 and again.status_code == 404
    assert "already recorded" in again.json()["error"]["message"]
    assert httpx.post(f"{proxy.url}/v1/outcomes", json={"retrieval_id": rid}).status_code == 422
    assert [memory.library.outcomes(e.id) for e in memory.library.all()] == [(1, 0)]


def test_an_error_the_caller_ran_into_convicts_only_the_lesson_that_advised_it(tmp_path, upstream):
    poison = "When integrating samples with the trapezoidal rule in NumPy, call np.trapz(y, x)"
    right = "When integrating samples with the trapezoidal rule, use np.trapezoid(y, x), not np.trapz"
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    ids = {text: memory.add(text, "code.python").id for text in (poison, right)}
    with Served(create_app(memory, f"{upstream.url}/v1", min_similarity=-1.0)) as proxy:
        raw = _client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": poison}])
        rid = raw.headers["x-dso-retrieval-id"]
        assert set(raw.headers["x-dso-lessons"].split(",")) == set(ids.values())
        post = lambda body: httpx.post(f"{proxy.url}/v1/outcomes", json={"retrieval_id": rid} | body)  # noqa: E731
        unrelated = post({"error": "ZeroDivisionError: division by zero", "code": "r = 1 / 0"})
        assert unrelated.json() == {"retrieval_id": rid, "refuted": [], "recorded": 0}  # nothing convicted, still open
        reply = post({"error": "AttributeError: module 'numpy' has no attribute 'trapz'", "code": "r = np.trapz(u, t)"})
        assert reply.status_code == 200 and reply.json()["refuted"] == [ids[poison]] and reply.json()["recorded"] == 1
        assert post({"helped": True}).status_code == 404  # the retrieval's outcome is in
        lib = memory.library
        harmed = {e.text: uses - helped for e in lib.all() for uses, helped in [lib.outcomes(e.id)]}
        assert harmed == {poison: 1, right: 0}
        raw = _client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": right}])
        rid = raw.headers["x-dso-retrieval-id"]
        stray = post({"lessons": {"f" * 64: True}})
        assert stray.status_code == 400 and "were not given by retrieval" in stray.json()["error"]["message"]
        assert post({"lessons": {ids[right]: True}}).json()["recorded"] == 1
    memory.close()


def test_bad_requests_get_openai_shaped_errors_and_reach_no_upstream(proxy, upstream):
    with pytest.raises(openai.BadRequestError, match="messages"):
        _client(proxy).chat.completions.create(model="m", messages="not a list")
    assert httpx.post(f"{proxy.url}/v1/chat/completions", content=b"{nope").status_code == 400
    with pytest.raises(openai.APIStatusError, match="--max-body") as err:
        _client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 65 * 1024}])
    assert err.value.status_code == 413 and err.value.code == "request_too_large"
    assert upstream.app.state.requests == []


def test_a_wrong_token_is_an_authentication_error_that_says_so(memory, upstream):
    with Served(create_app(memory, f"{upstream.url}/v1", token="t0k")) as guarded:
        with pytest.raises(openai.AuthenticationError, match="wrong token") as err:
            _client(guarded, "wrong").chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.code == "invalid_api_key" and err.value.body["type"] == "invalid_request_error"
        missing = httpx.get(f"{guarded.url}/v1/models")
    assert missing.status_code == 401 and "missing token" in missing.json()["error"]["message"]
    assert upstream.app.state.requests == []


def test_the_clients_key_goes_upstream_unless_the_proxy_has_its_own_token(memory, upstream):
    seen = []
    app = scripted_upstream()

    @app.middleware("http")
    async def keep_auth(request, call_next):
        seen.append(request.headers.get("authorization"))
        return await call_next(request)

    with Served(app) as up, Served(create_app(memory, f"{up.url}/v1")) as open_proxy, \
            Served(create_app(memory, f"{up.url}/v1", token="t0k", upstream_key="sk-upstream")) as guarded:
        _client(open_proxy, "sk-client").models.list()
        _client(guarded, "t0k").models.list()
        with pytest.raises(openai.AuthenticationError):
            _client(guarded, "wrong").models.list()
    assert seen == ["Bearer sk-client", "Bearer sk-upstream"]


def test_an_unreachable_or_slow_upstream_is_a_gateway_error(memory):
    import asyncio

    from fastapi import FastAPI

    slow = FastAPI()

    @slow.post("/v1/chat/completions")
    async def hang():
        await asyncio.sleep(5)

    with Served(slow) as up, Served(create_app(memory, f"{up.url}/v1", timeout_s=0.3)) as proxy:
        with pytest.raises(openai.APIStatusError) as err:
            _client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.status_code == 504 and "did not answer within 0.3 s" in err.value.message
    with Served(create_app(memory, "http://127.0.0.1:9/v1")) as proxy:
        with pytest.raises(openai.APIStatusError) as err:
            _client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.status_code == 502


def test_a_memory_that_is_down_still_answers_without_lessons_and_says_why(upstream):
    from dsonet.memory import open_memory

    memory = open_memory(node="http://127.0.0.1:9", timeout_s=2)  # nothing listens there
    with Served(create_app(memory, f"{upstream.url}/v1")) as proxy:
        raw = _client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": QUESTION}])
    memory.close()
    assert raw.headers["x-dso-lessons"] == "" and "127.0.0.1:9" in raw.headers["x-dso-error"]
    assert [m["role"] for m in upstream.app.state.requests[-1]["messages"]] == ["user"]


def test_the_encoder_loads_at_start_not_on_the_first_request(tmp_path, monkeypatch):
    path = tmp_path / "lazy.sqlite"
    Library(path, encoder=HashEncoder()).close()  # the file's profile is HashEncoder's space
    loads = []
    monkeypatch.setattr("dsonet.encoders.default_encoder", lambda: loads.append(time.monotonic()) or HashEncoder())
    memory = LocalMemory(Library(path))  # no encoder given: the library loads the default when first asked
    assert loads == []
    with Served(scripted_upstream()) as up, Served(create_app(memory, f"{up.url}/v1")) as proxy:
        assert len(loads) == 1  # before any request: the proxy's start loaded it
        _client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    memory.close()
    assert len(loads) == 1


def test_a_lesson_whose_scope_contradicts_the_agents_environment_is_held_back_and_named(tmp_path, upstream):
    mem = LocalMemory(Library(tmp_path / "scoped.sqlite", encoder=HashEncoder()))
    lesson = mem.add(QUESTION, "math.ratio", scope=Scope.parse(["numpy==2.4.6"]))
    with Served(create_app(mem, f"{upstream.url}/v1", min_similarity=0.5,
                           environment=Scope.parse(["numpy==1.26.4"]))) as proxy:
        def answered(**headers):
            return _client(proxy).chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": QUESTION}], extra_headers=headers).headers

        held = answered()  # the proxy's own environment
        assert held["x-dso-lessons"] == "" and held["x-dso-held-back"] == f"{lesson.id}=numpy 2.4.6 learned, 1.26.4 here"
        fits = answered(**{"X-DSO-Environment": "numpy==2.4.0,python==3.11.9"})
        assert fits["x-dso-lessons"] == lesson.id and "x-dso-held-back" not in fits
        with pytest.raises(openai.BadRequestError, match="x-dso-environment: scope: 'numpy>=2'"):
            answered(**{"X-DSO-Environment": "numpy>=2"})
    mem.close()


def test_tags_keep_the_injected_lessons_to_a_scope_from_the_proxy_or_the_request(tmp_path, upstream):
    mem = LocalMemory(Library(tmp_path / "tagged.sqlite", encoder=HashEncoder()))
    lesson = mem.add(LESSON, "math.ratio", tags=("project:billing",))
    with Served(create_app(mem, f"{upstream.url}/v1", min_similarity=0.5, tags=("project:search",))) as proxy:
        def injected(**headers):
            raw = _client(proxy).chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": QUESTION}], extra_headers=headers)
            return raw.headers["x-dso-lessons"]

        assert injected() == ""  # the proxy's own scope holds no such lesson
        assert injected(**{"X-DSO-Tags": "project:billing"}) == lesson.id
        with pytest.raises(openai.BadRequestError, match="x-dso-tags: tags: 'Bad Tag'"):
            injected(**{"X-DSO-Tags": "Bad Tag"})
    mem.close()
