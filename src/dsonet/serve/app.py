"""`dso llm serve`: a model behind OpenAI's chat completions API.

    POST /v1/chat/completions   messages -> the model's own chat template -> the model's slots -> choices;
                                ``stream: true`` as server-sent events ending with ``data: [DONE]``;
                                ``tools``/``tool_choice`` ("auto", "none", "required", a named function)
    GET  /v1/models             the model's id (and /v1/models/{id})
    GET  /health                the model, its slots, the sequences running and waiting (no token)

Errors have OpenAI's shape, naming the field at fault (``param``): 400 for a body that is not a
chat request or a prompt that does not fit the context (code ``context_length_exceeded``), 404
for a model not served here, 500 when generation itself fails. With ``token`` every route but
/health demands it as the API key, as `dso proxy` does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from dsonet import __version__
from dsonet.asgi import BearerToken, BodyLimit
from dsonet.asgi.openai_errors import openai_error, openai_error_body, openai_response, read_json_object
from dsonet.learn.chat import LLMError
from dsonet.learn.llama_engine import Generated
from dsonet.learn.llama_engine import Request as GenRequest
from dsonet.serve.model import ServedModel
from dsonet.serve.request import BadRequest, ChatRequest, parse_chat
from dsonet.serve.template import TemplateError
from dsonet.serve.tools import ToolCallStream, parse_tool_calls, tool_grammar
from dsonet.serve.worker import Worker

MAX_BODY = 4 * 1024 * 1024  # an agent's whole history fits: the context holds far fewer tokens


def create_app(model: ServedModel, *, token: str | None = None, max_body: int = MAX_BODY):
    """The server as an ASGI app; concurrent requests share the model through one `Worker`."""
    worker = Worker(model.run)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        worker.start()
        yield
        await asyncio.to_thread(worker.close)

    app = FastAPI(title="dsonet llm serve", version=__version__, lifespan=lifespan,
                  description="OpenAI-compatible chat completions from the embedded model.")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:  # unknown routes, wrong methods
        return openai_response(exc.status_code, f"{exc.detail}; this server has POST /v1/chat/completions, "
                                                "GET /v1/models and GET /health")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await read_json_object(request)
        if isinstance(body, Response):
            return body
        try:
            chat = parse_chat(body, model.names)
            tokens = await asyncio.to_thread(model.tokenize, _render(model, chat))
            sequences = _sequences(chat, tokens, model.n_ctx)
        except BadRequest as exc:
            return openai_response(exc.status, str(exc), exc.param, exc.code)
        if chat.stream:
            return StreamingResponse(_events(worker, chat, sequences, len(tokens)), media_type="text/event-stream")
        try:
            done = await worker.generate(sequences)
        except LLMError as exc:
            return openai_response(500, f"generation failed: {exc}")
        return JSONResponse(_completion(chat, done, len(tokens)))

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(model.id)]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str) -> Response:
        if name not in model.names:
            return openai_response(404, f"model {name!r} is not served here; GET /v1/models lists {model.id!r}",
                                   "model", "model_not_found")
        return JSONResponse(_model_card(name))

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": model.id, "n_ctx": model.n_ctx, "slots": model.slots,
                "running": worker.running, "waiting": worker.waiting}

    guarded = BodyLimit(app, max_body, hint="raise --max-body", error_body=openai_error_body)
    return BearerToken(guarded, token, error_body=openai_error_body)


def _render(model: ServedModel, chat: ChatRequest) -> str:
    try:
        return model.template.render(chat.messages, chat.tools)
    except TemplateError as exc:  # its message names the field already
        raise BadRequest("messages", str(exc).removeprefix("messages: ")) from None


def _sequences(chat: ChatRequest, tokens: list[int], n_ctx: int) -> list[GenRequest]:
    """One sequence per choice; a call is forced by a grammar when it is required."""
    room = n_ctx - len(tokens)
    if room < 1:
        raise BadRequest("messages", f"the prompt is {len(tokens)} tokens and the context holds {n_ctx} (prompt and "
                                     "answer); shorten the messages or serve with a larger --n-ctx",
                         code="context_length_exceeded")
    if chat.max_tokens is not None and chat.max_tokens > room:
        raise BadRequest("max_tokens", f"{chat.max_tokens} with a prompt of {len(tokens)} tokens exceeds the "
                                       f"context of {n_ctx}; ask for at most {room}", code="context_length_exceeded")
    grammar = tool_grammar(chat.callable) if chat.required else None
    return [GenRequest(tokens=tokens, temperature=chat.temperature, max_tokens=chat.max_tokens or room,
                      seed=chat.seed + i, stop=chat.stop, grammar=grammar) for i in range(chat.n)]


def _model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "dsonet"}


def _usage(prompt_tokens: int, done: list[Generated]) -> dict:
    completion_tokens = sum(g.tokens for g in done)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _finish(g: Generated, calls: list[dict]) -> str:
    return "tool_calls" if calls else g.finish


def _completion(chat: ChatRequest, done: list[Generated], prompt_tokens: int) -> dict:
    """OpenAI's chat.completion object for the generated choices."""
    choices = []
    for i, g in enumerate(done):
        content, calls = parse_tool_calls(g.text, chat.callable) if chat.callable else (g.text, [])
        message = {"role": "assistant", "content": content} | ({"tool_calls": calls} if calls else {})
        choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": _finish(g, calls)})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": chat.model, "choices": choices, "usage": _usage(prompt_tokens, done)}


def _sse(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


async def _events(worker: Worker, chat: ChatRequest, sequences: list[GenRequest], prompt_tokens: int
                  ) -> AsyncIterator[str]:
    """The completion as chat.completion.chunk events: each choice's role, its content as decoded, its
    tool calls once whole (a call is held until it parses), its finish reason; the usage; [DONE]."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
    for i, s in enumerate(sequences):
        s.on_text = lambda piece, i=i: loop.call_soon_threadsafe(pieces.put_nowait, (i, piece))
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": chat.model}

    def chunk(i: int, delta: dict, finish: str | None = None) -> str:
        return _sse(head | {"choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    streams = [ToolCallStream(chat.callable) for _ in sequences]
    for i in range(len(sequences)):
        yield chunk(i, {"role": "assistant", "content": ""})
    task = asyncio.ensure_future(worker.generate(sequences))
    task.add_done_callback(lambda _: pieces.put_nowait(None))  # after every piece: they were queued first
    try:
        while (item := await pieces.get()) is not None:
            if text := streams[item[0]].feed(item[1]):
                yield chunk(item[0], {"content": text})
        done = task.result()
    except LLMError as exc:  # the status went out with the first event: the error goes as an event
        yield _sse(openai_error(500, f"generation failed: {exc}"))
        yield _sse("[DONE]")
        return
    finally:
        task.cancel()  # a client that went away: its sequences are dropped if not started
    for i, g in enumerate(done):
        rest, calls = streams[i].close()
        if rest:
            yield chunk(i, {"content": rest})
        if calls:
            yield chunk(i, {"tool_calls": [{"index": k} | call for k, call in enumerate(calls)]})
        yield chunk(i, {}, _finish(g, calls))
    if chat.include_usage:
        yield _sse(head | {"choices": [], "usage": _usage(prompt_tokens, done)})
    yield _sse("[DONE]")
