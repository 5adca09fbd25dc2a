"""Every /v1 route the proxy does not amend goes to the upstream unchanged, so a client whose
OPENAI_BASE_URL points at the proxy keeps embeddings, completions, models and the rest: checked
with the `openai` client against a real upstream that records what reached it."""

import json
import sys
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from dsonet.bench.proxy import Served, scripted_upstream
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import create_app

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402


@pytest.fixture
def upstream():
    """The scripted chat upstream, plus the routes the proxy only passes through; each request's
    method, path, query, body bytes and headers are kept in ``app.state.seen``."""
    app = scripted_upstream()
    app.state.seen = []

    @app.middleware("http")
    async def keep(request: Request, call_next):
        app.state.seen.append({"method": request.method, "path": request.url.path, "query": request.url.query,
                               "body": await request.body(), "headers": dict(request.headers)})
        return await call_next(request)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await request.json()
        return {"object": "list", "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1},
                "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1.0]}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        choice = {"index": 0, "text": f"echo: {body['prompt']}", "finish_reason": "stop", "logprobs": None}
        if body.get("stream"):
            def events():
                for word in choice["text"].split(" "):
                    yield 'data: {"id": "c", "object": "text_completion", "created": 0, "model": "m", ' \
                          f'"choices": [{{"index": 0, "text": "{word} ", "finish_reason": null, "logprobs": null}}]}}\n\n'
                yield "data: [DONE]\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        return {"id": "c", "object": "text_completion", "created": 0, "model": body["model"], "choices": [choice]}

    @app.delete("/v1/files/{file_id}")
    async def delete_file(file_id: str):
        return {"id": file_id, "object": "file", "deleted": True}

    @app.get("/v1/teapot")
    async def teapot():
        return JSONResponse({"error": {"message": "short and stout", "type": "teapot", "param": None,
                                       "code": None}}, status_code=418)

    with Served(app) as served:
        served.app = app
        yield served


@pytest.fixture
def proxy(tmp_path, upstream):
    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    with Served(create_app(memory, f"{upstream.url}/v1", max_body=64 * 1024)) as served:
        yield served
    memory.close()


def _client(proxy):
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-client", max_retries=0)


def test_embeddings_completions_and_models_reach_the_upstream_unchanged(proxy, upstream):
    client = _client(proxy)
    vector = client.embeddings.create(model="emb", input="When a ratio is given", encoding_format="float")
    assert vector.data[0].embedding == [0.25, -0.5, 1.0]
    sent = upstream.app.state.seen[-1]
    assert (sent["method"], sent["path"]) == ("POST", "/v1/embeddings")
    assert json.loads(sent["body"]) == {"input": "When a ratio is given", "model": "emb", "encoding_format": "float"}
    assert sent["headers"]["authorization"] == "Bearer sk-client"  # the client's key, no proxy token
    odd = b'{ "model":"emb",\n  "input" : "byte for byte" }'  # not how the proxy would write it
    httpx.post(f"{proxy.url}/v1/embeddings", content=odd, headers={"content-type": "application/json"})
    assert upstream.app.state.seen[-1]["body"] == odd
    streamed = httpx.post(f"{proxy.url}/v1/embeddings", content=iter([odd[:9], odd[9:]]),  # chunked, no length
                          headers={"content-type": "application/json"})
    assert streamed.status_code == 200 and upstream.app.state.seen[-1]["body"] == odd
    assert client.completions.create(model="m", prompt="two words").choices[0].text == "echo: two words"
    streamed = "".join(c.choices[0].text for c in client.completions.create(model="m", prompt="a b", stream=True))
    assert streamed == "echo: a b "
    assert [m.id for m in client.models.list()] == ["scripted"]
    assert all("x-dso-lessons" not in s["headers"] for s in upstream.app.state.seen)


def test_any_method_path_and_query_pass_through_and_upstream_errors_come_back_as_they_are(proxy, upstream):
    client = _client(proxy)
    raw = client.files.with_raw_response.delete("file-42", extra_query={"trace": "1"})
    assert raw.parse().deleted and raw.headers.get("x-dso-lessons") is None
    assert {k: upstream.app.state.seen[-1][k] for k in ("method", "path", "query")} == \
        {"method": "DELETE", "path": "/v1/files/file-42", "query": "trace=1"}
    with pytest.raises(openai.APIStatusError, match="short and stout") as err:
        client.get("/teapot", cast_to=object)
    assert err.value.status_code == 418


def test_the_body_limit_holds_on_passed_through_routes(proxy, upstream):
    with pytest.raises(openai.APIStatusError, match="--max-body") as err:
        _client(proxy).embeddings.create(model="emb", input="x" * 65 * 1024)
    assert err.value.status_code == 413 and err.value.code == "request_too_large"
    chunked = httpx.post(f"{proxy.url}/v1/completions", content=iter([b"x" * 40 * 1024] * 2))  # no length declared
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
    assert upstream.app.state.seen == []
