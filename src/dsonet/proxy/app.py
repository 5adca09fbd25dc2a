"""`dso proxy`: an OpenAI-compatible endpoint that adds the library's lessons to every request.

    POST /v1/chat/completions   lessons for the last user message go into the system message
    POST /v1/responses          ... into ``instructions`` (the Responses API's system message)
    POST /v1/episodes           {"messages": [...]}: a run's history, learned from (with ``learner``)
    POST /v1/outcomes           {"retrieval_id", "helped"}: did the lessons of that response help?
                                ({"lessons": {id: bool}}: each; {"error", "code"}: the code the answer
                                gave failed, and lessons that advised what the error refuses harmed)
    *    /v1/...                every other route (models, embeddings, completions, files...) passed
                                through to the upstream unchanged
    GET  /health                no token needed

With ``learner`` (`dso proxy --learn`), every request's history is read for episodes (code that
failed, its error line, and later code that ran) that become lessons, and every answer given with
lessons is watched for its result in the run's next requests: that result is the lessons' outcome,
with nothing for the client to call; each lesson carries its evidence, the episodes and the agents
(told apart by their API keys) that gave it (`dsonet.proxy.learning`). With ``reflect`` as well (`--reflect`), an
episode whose error line names no fix is put to the upstream model (the model the request named, the
proxy's own credentials), in the background, and the lesson of its reply is kept on probation.

Both completion endpoints forward the (amended) body to ``upstream`` unchanged otherwise,
streaming or not, and pass the upstream's answer back byte for byte. Every answer carries
``X-DSO-Lessons`` (the injected experiences' ids, comma-separated; empty when none passed the
threshold), ``X-DSO-Threshold`` (the cosine a lesson had to reach: ``min_similarity``, else the
one calibrated for the memory's space), ``X-DSO-Best-Score`` (the best score the search saw, passed
or not, so an empty answer says how near it came) and, when lessons were injected,
``X-DSO-Retrieval-Id`` to send to /v1/outcomes. A request's ``X-DSO-Tags: project:billing,agent:x`` keeps
its lessons to those carrying every tag (the proxy's ``tags`` otherwise). A request's
``X-DSO-Environment: numpy==1.26.4,python==3.11.9`` is the agent's environment (the proxy's ``environment``
otherwise): lessons whose scope contradicts it are never injected, and ``X-DSO-Held-Back`` names each
(``<id>=<reason>``, ``; ``-separated; `dsonet.scope`). When the memory cannot be searched
(a node that is down), the request still goes upstream, without lessons, and ``X-DSO-Error`` says why.

Authentication: with ``token``, clients send it as their API key and the proxy talks to the
upstream with ``upstream_key``; without one (loopback only), the client's own Authorization
header goes to the upstream, so pointing OPENAI_BASE_URL at the proxy is the whole setup.
The proxy's own refusals have OpenAI's error shape, so SDK clients raise them with our message:
a wrong token 401, bodies over ``max_body`` (on every route) 413, a body that is not an OpenAI
request 400, an upstream that cannot be reached 502, one that does not answer within
``timeout_s`` 504. The memory is searched once at start, so the encoder is loaded before the
first request is taken.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect

from dsonet import __version__
from dsonet.asgi import BearerToken, BodyLimit
from dsonet.asgi.openai_errors import openai_error_body, openai_response, read_json_object
from dsonet.errors import DsoError
from dsonet.learn.code_lessons import refutes
from dsonet.library import Hit, Hits, LibraryError
from dsonet.library.contract import Store
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import PENDING, UnknownRetrieval
from dsonet.learn.episodes import Episode, reflection, responses_messages
from dsonet.library.store.tags import checked as checked_tags
from dsonet.proxy.inject import RequestShapeError, chat_query, inject_chat, inject_responses, responses_query
from dsonet.proxy.learning import TrafficLearner
from dsonet.scope import MAX_ENVIRONMENT_PINS, Scope, ScopeError

LESSONS_HEADER = "x-dso-lessons"
RETRIEVAL_HEADER = "x-dso-retrieval-id"
THRESHOLD_HEADER = "x-dso-threshold"
BEST_SCORE_HEADER = "x-dso-best-score"
ERROR_HEADER = "x-dso-error"  # why no lessons were looked up (the request still went upstream)
TAGS_HEADER = "x-dso-tags"  # a request's scopes (comma-separated), instead of the proxy's --tag ones
ENVIRONMENT_HEADER = "x-dso-environment"  # a request's pins (comma-separated), instead of the proxy's own
HELD_BACK_HEADER = "x-dso-held-back"  # lessons found but not injected: their scope contradicts the environment
OUTCOME_SHAPES = ('send {"retrieval_id": "<X-DSO-Retrieval-Id of the response>"} with "helped": true|false (every '
                  'lesson), "lessons": {"<id from X-DSO-Lessons>": true|false} (each), or "error": "<the error line '
                  'the code raised>" and "code": "<the code that raised it>" (lessons whose advice it refuses: harmed)')
REFLECTION_TOKENS = 96  # one lesson of at most 32 words
log = logging.getLogger(__name__)
HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
# not passed upstream: the proxy's own connection and framing, the upstream's host, and the key (see upstream_headers)
CLIENT_ONLY_HEADERS = HOP_HEADERS | {"host", "authorization", "accept-encoding", TAGS_HEADER, ENVIRONMENT_HEADER}
PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def create_app(memory: Store, upstream: str, *, upstream_key: str | None = None, token: str | None = None,
               max_body: int = 4 * 1024 * 1024, timeout_s: float = 300.0, k: int = K,
               min_similarity: float | None = None, max_tokens: int = MAX_TOKENS, tags: tuple[str, ...] = (),
               transport: httpx.AsyncBaseTransport | None = None, learner: TrafficLearner | None = None,
               reflect: bool = False, environment: Scope | None = None):
    """The proxy as an ASGI app. ``min_similarity`` None: the threshold calibrated for the memory's
    space. ``tags``: inject only lessons carrying every one (a request's ``X-DSO-Tags`` replaces them).
    ``environment``: the agents' (`dsonet.scope`; a request's ``X-DSO-Environment`` replaces it).
    ``transport`` replaces the network in tests of the app alone. ``learner``: every request's history
    and every answer are read for episodes and outcomes (`dso proxy --learn`); ``reflect``: episodes
    whose error names no fix are put to the upstream model (`--reflect`)."""
    base = upstream.rstrip("/")
    client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), transport=transport)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await anyio.to_thread.run_sync(warm_up, memory)
        yield
        for task in list(reflecting):
            task.cancel()
        await client.aclose()

    app = FastAPI(title="dsonet proxy", version=__version__, lifespan=lifespan,
                  description="OpenAI-compatible; injects the library's lessons into the system message.")

    @app.exception_handler(ClientDisconnect)
    async def gone(_: Request, _exc: ClientDisconnect) -> Response:
        # the body stopped coming (the client left, or the server cut it at its deadline): nobody to answer,
        # and nothing worth a traceback per connection in the log
        return Response(status_code=400)

    def upstream_headers(request: Request) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in CLIENT_ONLY_HEADERS}
        if upstream_key:
            headers["authorization"] = f"Bearer {upstream_key}"
        elif token is None and "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]  # the client's own key, passed through
        return headers

    served: OrderedDict[str, list[Hit]] = OrderedDict()  # retrieval id -> its lessons, for an error's verdicts
    reflecting: set[asyncio.Task] = set()  # held until done: the loop keeps only weak references to tasks

    async def recall(query: str | None, scopes: tuple[str, ...], env: Scope | None) -> Hits | None:
        if not query:
            return None
        r = await anyio.to_thread.run_sync(
            lambda: memory.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens, tags=scopes,
                                  environment=env))
        if r.retrieval_id is not None:
            served[r.retrieval_id] = list(r)
            while len(served) > PENDING:
                served.popitem(last=False)
        return r

    def lesson_headers(r: Hits | None) -> dict[str, str]:
        if r is None:  # no user text: nothing was searched
            return {LESSONS_HEADER: ""}
        headers = {LESSONS_HEADER: ",".join(h.experience.id for h in r), THRESHOLD_HEADER: f"{r.threshold:.4f}"}
        if r.best_score is not None:  # seen even when under the threshold: how near the library came
            headers[BEST_SCORE_HEADER] = f"{r.best_score:.4f}"
        if r.retrieval_id is not None:
            headers[RETRIEVAL_HEADER] = r.retrieval_id
        if r.held_back:
            headers[HELD_BACK_HEADER] = "; ".join(f"{b.id}={b.reason}" for b in r.held_back)
        return headers

    async def forward(request: Request, path: str, content: bytes, extra: dict[str, str],
                      on_answer=None) -> Response:
        """``content`` to the upstream's ``path`` with the request's method, query and headers; its answer
        back as it comes (an event stream chunk by chunk), with ``extra`` headers. ``on_answer``: called
        with a successful answer's bytes, a stream's once it has ended."""
        url = f"{base}{path}" + (f"?{request.url.query}" if request.url.query else "")
        req = client.build_request(request.method, url, headers=upstream_headers(request), content=content)
        try:
            reply = await client.send(req, stream=True)
        except httpx.TimeoutException:
            return openai_response(504, f"upstream {url} did not answer within {timeout_s:g} s (raise --timeout)")
        except httpx.HTTPError as exc:
            return openai_response(502, f"upstream {url} unreachable: {exc}; check --upstream")
        headers = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_HEADERS} | extra
        if not reply.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                answer = await reply.aread()
            except httpx.HTTPError as exc:
                return openai_response(502, f"upstream {url} broke off its answer: {exc}")
            finally:
                await reply.aclose()
            if on_answer is not None and reply.status_code == 200:
                await anyio.to_thread.run_sync(on_answer, answer)
            return Response(answer, status_code=reply.status_code, headers=headers)
        seen = on_answer if reply.status_code == 200 else None
        return StreamingResponse(_relay(reply, seen), status_code=reply.status_code, headers=headers,
                                 background=BackgroundTask(reply.aclose))

    async def complete(request: Request, path: str, query_of, amend, history_of, answer_of) -> Response:
        body = await read_json_object(request)
        if isinstance(body, Response):
            return body
        history = history_of(body)  # as the client sent it, before any injection
        # before the search, not after the answer: a lesson this history teaches can serve this very request
        if learner is not None:
            agent = request.headers.get("authorization", "")  # who the evidence counts (`learning.agent_key`)
            unexplained = await anyio.to_thread.run_sync(learn, history, agent)
            if reflect and unexplained and isinstance(body.get("model"), str):
                auth = {k: v for k, v in upstream_headers(request).items() if k == "authorization"}
                task = asyncio.create_task(reflect_on(unexplained, body["model"], auth, agent))
                reflecting.add(task)
                task.add_done_callback(reflecting.discard)
        try:
            query = query_of(body)
            asked = request.headers.get(TAGS_HEADER)
            scopes = tags if asked is None else checked_tags(t.strip() for t in asked.split(",") if t.strip())
            pins = request.headers.get(ENVIRONMENT_HEADER)
            env = environment if pins is None else Scope.parse(pins, limit=MAX_ENVIRONMENT_PINS)
        except ScopeError as exc:
            return openai_response(400, f"{ENVIRONMENT_HEADER}: {exc}")
        except (RequestShapeError, LibraryError) as exc:
            return openai_response(400, f"{TAGS_HEADER}: {exc}" if isinstance(exc, LibraryError) else str(exc))
        try:
            r = await recall(query, scopes, env)
        except DsoError as exc:  # the memory (a node, say) is down: answer without lessons, and say why
            log.warning("no lessons for this request: %s", exc)
            reason = " ".join(str(exc).split())[:300].encode("ascii", "replace").decode()
            return await forward(request, path, json.dumps(body).encode(), {LESSONS_HEADER: "", ERROR_HEADER: reason})
        if r:
            body = amend(body, r)
        watch = None if learner is None or not r else lambda answer: learner.answered(history, r, answer_of(answer))
        return await forward(request, path, json.dumps(body).encode(), lesson_headers(r), watch)

    def learn(history: list[dict], agent: str) -> list[Episode]:
        learned = learner.observe(history, agent)
        if learned.episodes or learned.outcomes:
            log.info("learned from traffic: %d new episodes, lessons %s, %d inferred outcomes",
                     len(learned.episodes), learned.lessons, learned.outcomes)
        return learned.unexplained

    async def reflect_on(episodes: list[Episode], model: str, auth: dict[str, str], agent: str) -> None:
        """Each episode put to the upstream's ``model`` (`episodes.reflection`); what its replies teach, kept
        with ``agent``'s episode as evidence."""
        for episode in episodes:
            body = {"model": model, "messages": [{"role": "user", "content": reflection(episode)}],
                    "temperature": 0, "max_tokens": REFLECTION_TOKENS}
            try:
                reply = await client.post(f"{base}/chat/completions", json=body, headers=auth)
                reply.raise_for_status()
                text = reply.json()["choices"][0]["message"]["content"] or ""
            except (httpx.HTTPError, ValueError, LookupError, TypeError) as exc:  # a reply without a message too
                log.warning("no reflection on an episode: the upstream's answer failed (%s)", exc)
                continue
            said = await anyio.to_thread.run_sync(learner.reflected, episode, text, agent)
            log.info("reflected on an episode: %s", f"lesson {said}" if said else "its reply held no lesson that holds")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, "/chat/completions", chat_query, inject_chat,
                              lambda body: body.get("messages") or [], chat_answer)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await complete(request, "/responses", responses_query, inject_responses, responses_messages,
                              responses_answer)

    @app.post("/v1/outcomes")
    async def outcomes(request: Request) -> Response:
        body = await read_json_object(request)
        if isinstance(body, Response):
            return body
        rid, helped, lessons = body.get("retrieval_id"), body.get("helped"), body.get("lessons")
        error, code = body.get("error"), body.get("code")
        if not isinstance(rid, str) or not (isinstance(helped, bool) or isinstance(lessons, dict)
                                            or (isinstance(error, str) and isinstance(code, str))):
            return openai_response(422, OUTCOME_SHAPES)
        refuted = None
        if error is not None:  # the caller ran the code and it failed: a lesson whose advice the error refuses harmed
            if rid not in served:
                return openai_response(404, f"retrieval_id {rid[:40]!r}: unknown, forgotten or already recorded; "
                                            "send the X-DSO-Retrieval-Id of a response, once")
            refuted = [h.experience.id for h in served[rid] if refutes(error, code, h.experience.text)]
            if not refuted:  # nothing to convict; the retrieval stays open for a plain outcome
                return JSONResponse({"retrieval_id": rid, "refuted": [], "recorded": 0})
            helped, lessons = None, dict.fromkeys(refuted, False)
        try:
            recorded = await anyio.to_thread.run_sync(
                lambda: memory.outcome(rid, helped if lessons is None else None, lessons))
        except DsoError as exc:
            return openai_response(404 if isinstance(exc, UnknownRetrieval) else 400, str(exc))
        served.pop(rid, None)
        reply = {"retrieval_id": rid, "recorded": recorded}
        return JSONResponse(reply | ({"helped": helped} if lessons is None else {"lessons": lessons})
                            | ({"refuted": refuted} if refuted is not None else {}))

    @app.post("/v1/episodes")
    async def post_episodes(request: Request) -> Response:
        """A run's history posted by a framework that does not send its requests through the proxy:
        learned as if it had (``messages`` as chat completions send them, or ``input`` as Responses)."""
        if learner is None:
            return openai_response(409, "this proxy does not learn from traffic; start it with `dso proxy --learn`")
        body = await read_json_object(request)
        if isinstance(body, Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) and isinstance(body.get("input"), list):
            messages = responses_messages(body)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return openai_response(400, 'send {"messages": [...]} (a chat history) or {"input": [...]} (Responses items)')
        agent = request.headers.get("authorization", "")
        learned = await anyio.to_thread.run_sync(learner.observe, messages, agent)
        return JSONResponse({"episodes": len(learned.episodes), "lessons": learned.lessons,
                             "outcomes": learned.outcomes})

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "upstream": base}

    # last: a route above takes its own path and method first (GET /v1/chat/completions, the stored
    # completions, comes here)
    @app.api_route("/v1/{path:path}", methods=PASSTHROUGH_METHODS, include_in_schema=False)
    async def passthrough(request: Request, path: str) -> Response:
        """Any other OpenAI route goes to the upstream unchanged (within the body limit)."""
        return await forward(request, f"/{path}", await request.body(), {})

    guarded = BodyLimit(app, max_body, hint="raise the proxy's --max-body", error_body=openai_error_body)
    return BearerToken(guarded, token, error_body=openai_error_body)


def _events(answer: bytes) -> list[dict]:
    """The JSON objects of an event stream's ``data:`` lines (``[DONE]`` and anything else left out)."""
    out = []
    for line in answer.decode("utf-8", "replace").splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                event = json.loads(line[5:])
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                out.append(event)
    return out


def _json(answer: bytes) -> Any:
    try:
        return json.loads(answer)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def chat_answer(answer: bytes) -> list[dict]:
    """A chat completion's first choice as an assistant message, whole or streamed ([] for anything else)."""
    body = _json(answer)
    if isinstance(body, dict):
        choices = body.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        return [first["message"]] if isinstance(first.get("message"), dict) else []
    content, calls = [], {}  # a stream: the first choice's deltas, tool calls joined by their index
    for event in _events(answer):
        for choice in event.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) and choice.get("index", 0) == 0 else None
            if not isinstance(delta, dict):
                continue
            content.append(delta.get("content") or "")
            for piece in delta.get("tool_calls") or ():
                call = calls.setdefault(piece.get("index", 0), {"id": "", "function": {"name": "", "arguments": ""}})
                call["id"] = piece.get("id") or call["id"]
                fn = piece.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                call["function"]["arguments"] += fn.get("arguments") or ""
    if not content and not calls:
        return []
    return [{"role": "assistant", "content": "".join(content), "tool_calls": [calls[i] for i in sorted(calls)]}]


def responses_answer(answer: bytes) -> list[dict]:
    """A response's output items as assistant messages, whole or streamed (its response.completed event)."""
    body = _json(answer)
    if body is None:
        body = next((e.get("response") for e in _events(answer) if e.get("type") == "response.completed"), None)
    return responses_messages({"input": body.get("output") or []}) if isinstance(body, dict) else []


def warm_up(memory: Store) -> None:
    """One search before the first request: loads the encoder (seconds for the default one) and shows
    whether a node answers. A memory that fails here is reported; requests then go without lessons."""
    try:
        memory.search("warm-up", k=1, min_similarity=1.0)
    except DsoError as exc:
        log.warning("the memory did not answer at start (requests go upstream without lessons until it does): %s",
                    exc)


async def _relay(reply: httpx.Response, on_answer=None):
    """The upstream's stream, chunk by chunk as it arrives (SSE events pass through untouched;
    decoded, since the upstream's content-encoding header is not passed on); with ``on_answer``,
    the whole stream goes to it once it has ended."""
    kept: list[bytes] = []
    async for chunk in reply.aiter_bytes():
        if on_answer is not None:
            kept.append(chunk)
        yield chunk
    if on_answer is not None:
        await anyio.to_thread.run_sync(on_answer, b"".join(kept))
