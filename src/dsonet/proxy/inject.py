"""Where the lessons go in an OpenAI request, and which text they are retrieved for.

Chat Completions: the last user message is the query; the lessons join the system message (the
first message when its role is system or developer, else a new first message). Responses API:
the last user item of ``input`` (or ``input`` itself when it is a string) is the query, and the
lessons join ``instructions``. The lesson text itself is the learn layer's, so an agent behind
the proxy sees exactly what the learner's own rollouts see.
"""

from __future__ import annotations

import copy

from dsonet.learn.context import system_text

SYSTEM_ROLES = ("system", "developer")


def system_with_lessons(base: str, hits: list) -> str:
    """``base`` (the caller's own system text, kept first) and the lessons as the learner writes them:
    plain bullets quoted as notes from other agents, never as instructions."""
    return system_text(peers=[h.experience.text for h in hits], base=base).strip()


class RequestShapeError(ValueError):
    """A request whose messages/input are not shaped as the OpenAI API defines them."""


def _text(content, part_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in part_types)
    return ""


def chat_query(body: dict) -> str:
    """The last user message's text ('' when there is none)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RequestShapeError("messages: expected a list of {role, content} objects")
    for m in reversed(messages):
        if m.get("role") == "user":
            return _text(m.get("content"), ("text",)).strip()
    return ""


def responses_query(body: dict) -> str:
    """The text of ``input`` when it is a string, else of its last user item ('' when there is none)."""
    items = body.get("input")
    if isinstance(items, str):
        return items.strip()
    if not isinstance(items, list):
        raise RequestShapeError("input: expected a string or a list of input items")
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text(item.get("content"), ("input_text", "text")).strip()
    return ""


def inject_chat(body: dict, hits: list) -> dict:
    """A copy of the request whose system message carries the lessons."""
    out = copy.copy(body)
    messages = list(body["messages"])
    if messages and messages[0].get("role") in SYSTEM_ROLES:
        first = dict(messages[0])
        first["content"] = system_with_lessons(_text(first.get("content"), ("text",)), hits)
        messages[0] = first
    else:
        messages.insert(0, {"role": "system", "content": system_with_lessons("", hits)})
    out["messages"] = messages
    return out


def inject_responses(body: dict, hits: list) -> dict:
    """A copy of the request whose ``instructions`` carry the lessons."""
    out = copy.copy(body)
    base = body.get("instructions")
    out["instructions"] = system_with_lessons(base if isinstance(base, str) else "", hits)
    return out
