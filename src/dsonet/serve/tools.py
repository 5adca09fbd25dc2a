"""Tool calls as Qwen2.5 writes them, read into OpenAI's ``tool_calls``, and forced when they are required.

The model's template asks for each call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

`parse_tool_calls` turns every such block naming a declared tool into OpenAI's call
(``{"id", "type": "function", "function": {"name", "arguments": "<JSON string>"}}``) and leaves
the rest as content. A reply that is nothing but that JSON, bare or in a ```json fence, is a call
too: the 0.5B sometimes answers so when the call is not forced. `tool_grammar` is the GBNF that
makes the sampler write exactly one such block for one of the allowed names (``tool_choice``
"required" or a named function); a small model asked nicely often answers in prose instead.
`ToolCallStream` decides, while a reply is streamed, which text is content to send at once and
which may be a call to hold until the end.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Sequence

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.S)
_BARE = re.compile(r"\s*(?:```json\s*)?(\{.*\})\s*(?:```)?\s*", re.S)  # a whole reply that is one JSON call
FENCE = "```json"

# JSON as llama.cpp's grammars/json.gbnf writes it, whitespace bounded so a small model cannot pad for ever
_JSON_RULES = r'''
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
'''


def tool_grammar(names: Sequence[str]) -> str:
    """GBNF (root rule ``root``) for one ``<tool_call>`` block whose JSON names one of ``names``."""
    if not names:
        raise ValueError("tool_grammar: no function names; a required call needs at least one tool")
    alternatives = " | ".join(_gbnf_literal(json.dumps(name)) for name in names)
    return (f'root ::= "{_gbnf_escape(OPEN)}\\n{{\\"name\\": " name ", \\"arguments\\": " object '
            f'"}}\\n{_gbnf_escape(CLOSE)}"\nname ::= {alternatives}\n{_JSON_RULES}')


def _gbnf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _gbnf_literal(text: str) -> str:
    return f'"{_gbnf_escape(text)}"'


def parse_tool_calls(text: str, names: Sequence[str]) -> tuple[str | None, list[dict]]:
    """(content, calls): the blocks that are a JSON call to one of ``names`` become OpenAI's tool calls;
    everything else (prose, a block that is not such a call) stays in the content, None when empty.
    A last block the model never closed counts when its JSON is whole (it stopped at end of turn), and
    a reply that is only a call's JSON, bare or fenced, is that call."""
    bare = _BARE.fullmatch(text)
    if bare and (call := _call(bare.group(1), names)):
        return None, [call]
    calls, kept, last = [], [], 0
    for block in _BLOCK.finditer(text):
        call = _call(block.group(1), names)
        if call is None:
            continue
        kept.append(text[last:block.start()])
        last = block.end()
        calls.append(call)
    kept.append(text[last:])
    content = "".join(kept).strip()
    return (content or None) if calls else (text or None), calls


def _call(body: str, names: Sequence[str]) -> dict | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": obj["name"], "arguments": arguments}}


class ToolCallStream:
    """A streamed reply split as it comes: `feed` returns the content that can go out now; text from
    a ``<tool_call>`` on (or that may yet become one) is held, and so is a reply that may be a bare
    JSON call (it starts with ``{`` or a ```json fence); `close` parses what was held."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        self.text = ""
        self.sent = 0  # how much of ``text`` went out as content

    def feed(self, piece: str) -> str:
        self.text += piece
        if not self.names:  # no tools: every piece is content
            return self._send(len(self.text))
        if self.sent == 0 and _may_be_bare(self.text):
            return ""
        tag = self.text.find(OPEN, self.sent)
        if tag >= 0:
            return self._send(tag)
        return self._send(len(self.text) - _partial_tag(self.text))

    def close(self) -> tuple[str | None, list[dict]]:
        """(the content not sent yet, the tool calls): what the last chunks carry."""
        rest = self.text[self.sent:]
        self.sent = len(self.text)
        if not self.names:
            return rest or None, []
        return parse_tool_calls(rest, self.names)

    def _send(self, end: int) -> str:
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out


def _may_be_bare(text: str) -> bool:
    start = text.lstrip()
    return start.startswith(("{", FENCE)) or FENCE.startswith(start)


def _partial_tag(text: str) -> int:
    """How many characters at the end of ``text`` could begin ``<tool_call>``."""
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-k:]):
            return k
    return 0
