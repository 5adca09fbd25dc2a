"""A chat completion request, checked once at the boundary: every refusal names the field and the fix.

Fields the server does not use (``top_p``, ``presence_penalty``, ``user``, ``metadata``...) are
accepted and ignored, as OpenAI-compatible servers do, so clients written for OpenAI need no change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from dsonet.errors import DsoError

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 4  # OpenAI's limit
MAX_N = 8
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for a function's name


class BadRequest(DsoError, ValueError):
    """A request the server refuses: ``param`` is the field at fault, ``status`` the HTTP status."""

    def __init__(self, param: str | None, message: str, status: int = 400, code: str | None = None):
        self.param, self.status, self.code = param, status, code
        super().__init__(f"{param}: {message}" if param else message)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict]
    tools: list[dict]  # the declared tools, as sent; empty with tool_choice "none"
    callable: tuple[str, ...]  # the names a reply may call: all tools, the named one, or none
    required: bool  # a call must be made: "required", or a named function
    temperature: float
    max_tokens: int | None  # None: as many as the context leaves
    stop: tuple[str, ...]
    seed: int
    n: int
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage


def parse_chat(body: dict[str, Any], models: Sequence[str]) -> ChatRequest:
    """The checked request; `BadRequest` (400, or 404 for a model not served) otherwise."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model", f"required, a string; this server has {_listed(models)}")
    if model not in models:
        raise BadRequest("model", f"{model!r} is not served here; use {_listed(models)} (GET /v1/models)",
                         status=404, code="model_not_found")
    tools = _tools(body.get("tools"))
    callable_, required = _tool_choice(body.get("tool_choice"), tools)
    stream = _typed(body, "stream", bool, False)
    options = _typed(body, "stream_options", dict, {}) or {}
    return ChatRequest(
        model=model, messages=_messages(body.get("messages")), tools=tools if callable_ else [],
        callable=callable_, required=required, temperature=_temperature(body.get("temperature")),
        max_tokens=_max_tokens(body), stop=_stop(body.get("stop")), seed=_int(body, "seed", 0),
        n=_n(body.get("n")), stream=stream, include_usage=bool(options.get("include_usage")) and stream)


def _listed(models: Sequence[str]) -> str:
    return " or ".join(repr(m) for m in models)


def _typed(body: dict, field: str, kind: type, default):
    value = body.get(field, default)
    if value is not None and not isinstance(value, kind):
        raise BadRequest(field, f"expected {kind.__name__}, got {type(value).__name__}")
    return value if value is not None else default


def _int(body: dict, field: str, default: int | None) -> int | None:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(field, f"expected an integer, got {value!r}")
    return value


def _messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages", "required: a non-empty list of {role, content} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role", f"expected one of {', '.join(ROLES)}, got "
                                                    f"{m.get('role') if isinstance(m, dict) else m!r}")
        content = m.get("content")
        if not (isinstance(content, str) or (content is None and m["role"] == "assistant")
                or (isinstance(content, list) and all(isinstance(p, dict) for p in content))):
            raise BadRequest(f"messages[{i}].content", "expected a string or a list of content parts "
                                                       "(null only for an assistant's tool calls)")
        if m["role"] == "assistant" and content is None and not m.get("tool_calls"):
            raise BadRequest(f"messages[{i}].content", "null without tool_calls; send the assistant's text")
    return messages


def _tools(tools: Any) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("tools", "expected a list of {type: function, function: {name, parameters}}")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise BadRequest(f"tools[{i}]", "expected {type: function, function: {name, parameters}}")
        if not isinstance(function.get("name"), str) or not FUNCTION_NAME.match(function["name"]):
            raise BadRequest(f"tools[{i}].function.name", "required: 1-64 letters, digits, _ or -")
    return tools


def _tool_choice(choice: Any, tools: list[dict]) -> tuple[tuple[str, ...], bool]:
    names = tuple(t["function"]["name"] for t in tools)
    if choice is None:
        return names, False  # OpenAI's default: "auto" when tools are given
    if choice == "none":
        return (), False
    if choice in ("auto", "required"):
        if choice == "required" and not names:
            raise BadRequest("tool_choice", '"required" needs tools; declare them in tools')
        return names, choice == "required"
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(named, str):
        raise BadRequest("tool_choice", 'expected "none", "auto", "required" or {"type": "function", '
                                        '"function": {"name": NAME}}')
    if named not in names:
        raise BadRequest("tool_choice", f"names {named!r}, which is not in tools ({', '.join(names) or 'none'})")
    return (named,), True


def _temperature(value: Any) -> float:
    if value is None:
        return 1.0  # OpenAI's default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 2:
        raise BadRequest("temperature", f"expected a number from 0 to 2, got {value!r}")
    return float(value)


def _max_tokens(body: dict) -> int | None:
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = _int(body, field, None)
    if value is not None and value < 1:
        raise BadRequest(field, f"{value}; allow at least 1 token")
    return value


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP:
        raise BadRequest("stop", f"expected a string or a list of at most {MAX_STOP} non-empty strings")
    return tuple(stops)


def _n(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N:
        raise BadRequest("n", f"expected an integer from 1 to {MAX_N}, got {value!r}")
    return value
