"""The model's own chat template (the GGUF's ``tokenizer.chat_template``), rendered with jinja2.

llama.cpp's ``llama_chat_apply_template`` recognises a template by its markers and renders only
roles and text: no tools, no tool calls, no tool results. Qwen2.5's template puts the tools'
signatures into the system message and tool results into ``<tool_response>`` blocks, and the
model was trained on exactly that layout, so we render the template itself, as Hugging Face's
``apply_chat_template`` does: a sandboxed jinja2 environment with trimmed blocks, a ``tojson``
that neither sorts keys nor escapes HTML, and ``raise_exception`` for templates that refuse
a conversation.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Sequence

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from dsonet.learn.chat import LLMError


class TemplateError(LLMError, ValueError):
    """A conversation the model's template refuses, or a template that does not compile."""


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # Hugging Face's filter: jinja2's own sorts keys and escapes <>&, which changes what the model sees
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise TemplateError(f"messages: the model's chat template refuses them: {message}")


class ChatTemplate:
    """A compiled chat template: ``render(messages, tools)`` is the prompt to tokenize."""

    def __init__(self, source: str):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template: does not compile ({exc})") from exc

    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None,
               add_generation_prompt: bool = True) -> str:
        """``messages`` in OpenAI's form (`template_messages` turns them into the template's)."""
        try:
            return self._template.render(messages=template_messages(messages), tools=list(tools) if tools else None,
                                         add_generation_prompt=add_generation_prompt, bos_token="", eos_token="")
        except TemplateError:
            raise
        except (jinja2.TemplateError, TypeError) as exc:
            raise TemplateError(f"messages: the model's chat template cannot render them ({exc})") from exc


def template_messages(messages: Sequence[dict]) -> list[dict]:
    """OpenAI's messages as chat templates expect them: content a string (text parts joined, null as
    ""), ``developer`` as ``system``, and a tool call's arguments an object (OpenAI sends a JSON string;
    the template writes the object with ``tojson``, and a string would arrive quoted)."""
    return [_template_message(m) for m in messages]


def _template_message(message: dict) -> dict:
    out = dict(message)
    out["role"] = "system" if message["role"] == "developer" else message["role"]
    out["content"] = text_of(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = [_template_call(call) for call in message["tool_calls"]]
    return out


def _template_call(call: dict) -> dict:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # not JSON: the model sees the text as it was sent
    return {**call, "function": function}


def text_of(content: str | list | None) -> str:
    """A message's text: a string as it is, the text parts of a list joined, null as ""."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")
