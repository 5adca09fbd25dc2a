"""Episodes read off an agent's own traffic: code that failed, its error line, and later code that ran.

A coding agent (smolagents, the OpenAI Agents SDK, mini-swe-agent, LangGraph ...) resends its whole
history with every request: the task, each piece of code it wrote (a tool call's arguments, a fenced
or <code> block in its reply, smolagents' "Calling tools:" record of what it ran) and the result it
got back (a tool message, or the next user turn holding a traceback or an error line). An attempt
that raised, followed by one that ran without an error, is the best-against-worst comparison of one
query that the learner makes between rollouts, with the environment as the reward: the code that
ran plays the reference's role, the failed one the worst rollout's. No reference answer, no task
file and no outcome call are needed.

An attempt whose result never came back (the last reply of a run) is unknown, never a success.

    episodes(messages) -> list[Episode]           # from a chat completions request's ``messages``
    responses_messages(body) -> list[dict]        # a Responses request's ``input`` as such messages
    lesson(episode) -> str | None                 # the rule lesson its error line spells out
    reflection(episode) -> str                    # else: the reflector's prompt (`prompts.ADVANTAGE_CODE`)
    reflected(episode, reply) -> str | None       # and the lesson of its reply, if one holds
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Iterable

from dsonet.learn import code_lessons, parse, prompts

# a fenced block, or smolagents' <code> block (its default tags since 1.20), which the model's answer
# leaves open: smolagents stops the model at "</code>" and closes the block itself
_BLOCK = re.compile(r"```[ \t]*(?:py|python|python3)?[ \t]*\n(.*?)```|<code>(.*?)(?:</code>|\Z)", re.DOTALL)
# smolagents' record of what it ran, appended to the turn that wrote it: a Python list of tool calls
_CALLING_TOOLS = "Calling tools:\n"
# smolagents' interpreter words a missing module attribute its own way: "InterpreterError: Object
# <module 'numpy' from '...'> has no attribute trapz"; said as Python says it, a lesson can read it
_INTERPRETER_ATTRIBUTE = re.compile(r"InterpreterError: Object <module '([\w.]+)'[^>]*> has no attribute (\w+)")
# "AttributeError: module 'numpy' has no attribute 'trapz'" and the like; the last one a result names
_ERROR = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last)"
# the arguments of a tool call that hold code, in the order tried (smolagents, the Agents SDK's code tools,
# mini-swe-agent's bash, LangGraph's python REPL)
PROBATION = 0.3  # confidence of a lesson from an episode: nothing re-ran it, so it starts under a hand-written one
DOMAIN = "code"  # the domain lessons from episodes are filed under
CODE_KEYS = ("code", "python_code", "source", "script", "command", "cmd", "query", "input")


@dataclass(frozen=True)
class Attempt:
    code: str
    result: str | None  # what came back; None: nothing yet (the run's last reply)
    call_id: str = ""
    turn: int = 0  # the index of the assistant message that wrote it

    @property
    def error(self) -> str | None:
        """The result's last error line ("NameError: name 'x' is not defined"), None where it ran."""
        if self.result is None:
            return None
        found = _ERROR.findall(self.result)
        if found:
            kind, message = found[-1]
            line = f"{kind}: {message.strip()}"
            attribute = _INTERPRETER_ATTRIBUTE.search(line)
            return f"AttributeError: module '{attribute[1]}' has no attribute '{attribute[2]}'" if attribute else line
        return "Error: a traceback without an error line" if _TRACEBACK in self.result else None

    @property
    def ran(self) -> bool:
        return self.result is not None and self.error is None


@dataclass(frozen=True)
class Episode:
    task: str  # the run's first user message
    failed: str  # code that raised
    error: str  # its error line
    fixed: str  # the later code that ran
    fixed_task: str = ""  # where the code that ran is another run's (`dsonet.learn.pairing`): the task it ran for

    @property
    def key(self) -> str:
        """The same episode seen again (every turn resends the history) has the same key."""
        blob = json.dumps([" ".join(self.task.split()), self.failed.strip(), self.error, self.fixed.strip()])
        return hashlib.sha256(blob.encode()).hexdigest()


def remember(table: OrderedDict, key, value, limit: int) -> None:
    """``table[key] = value`` as the newest entry, the oldest forgotten past ``limit``: what a reader of
    traffic keeps of the runs it saw stays bounded however long it serves."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _tool_code(arguments: Any) -> str:
    """The code in a tool call's arguments (a JSON object as a string, or the code itself)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    if isinstance(arguments, dict):
        for key in CODE_KEYS:
            if isinstance(arguments.get(key), str):
                return arguments[key]
    return arguments if isinstance(arguments, str) else ""


def _ran_by_smolagents(text: str) -> str | None:
    """The code of smolagents' "Calling tools:" record in a turn's text (what its executor ran), None without one."""
    _, found, record = text.rpartition(_CALLING_TOOLS)
    if not found:
        return None
    try:
        calls = ast.literal_eval(record.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    codes = [_tool_code((c.get("function") or {}).get("arguments")) for c in calls if isinstance(c, dict)] \
        if isinstance(calls, list) else []
    return "\n\n".join(c for c in codes if c.strip()) or None


def _written_code(text: str) -> str:
    """The code an assistant turn wrote as text: smolagents' record of what it ran, else every block
    of the turn joined (smolagents runs a reply's blocks as one program, and one result answers the turn)."""
    ran = _ran_by_smolagents(text)
    if ran is not None:
        return ran
    return "\n\n".join(b.strip() for pair in _BLOCK.findall(text) for b in pair if b.strip())


def attempts(messages: Iterable[dict]) -> list[Attempt]:
    """Every piece of code the assistant wrote, in order, each with the result that came back for it."""
    out: list[Attempt] = []
    open_text: int | None = None  # the last assistant turn's attempt written as text, answered by the next user turn
    by_call: dict[str, int] = {}
    for turn, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            open_text = None
            for call in m.get("tool_calls") or ():
                code = _tool_code((call.get("function") or {}).get("arguments"))
                if code.strip():
                    by_call[call.get("id", "")] = len(out)
                    out.append(Attempt(code, None, call.get("id", ""), turn))
            code = "" if m.get("tool_calls") else _written_code(text_of(m.get("content")))
            if code:
                open_text = len(out)
                out.append(Attempt(code, None, "", turn))
        elif role == "tool" and m.get("tool_call_id") in by_call:
            i = by_call.pop(m["tool_call_id"])
            out[i] = replace(out[i], result=text_of(m.get("content")))
        elif role == "user" and open_text is not None:
            out[open_text] = replace(out[open_text], result=text_of(m.get("content")))
            open_text = None
    return out


def task_of(messages: Iterable[dict]) -> str:
    """A run's task: its first user message."""
    return next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")


def episodes(messages: list[dict]) -> list[Episode]:
    """Each failed attempt paired with the first later attempt that ran without an error."""
    task = task_of(messages)
    tried = attempts(messages)
    out = []
    for i, a in enumerate(tried):
        error = a.error
        if error is None:
            continue
        fixed = next((b for b in tried[i + 1:] if b.ran), None)
        if fixed is not None and fixed.code.strip() != a.code.strip():
            out.append(Episode(task, a.code, error, fixed.code))
    return out


def history_key(messages: list[dict]) -> str:
    """What identifies a run up to a turn, however a client re-serialises its messages: roles, texts,
    tool calls and the calls they answer."""
    blob = json.dumps([[m.get("role"), text_of(m.get("content")), m.get("tool_call_id"),
                        [[c.get("id"), (c.get("function") or {}).get("arguments")] for c in m.get("tool_calls") or ()]]
                       for m in messages])
    return hashlib.sha256(blob.encode()).hexdigest()


def responses_messages(body: dict) -> list[dict]:
    """A Responses API request's ``input`` as chat messages (function calls as tool calls), so one
    reader serves both endpoints."""
    items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for item in items or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": item.get("content")})
        elif kind == "function_call":
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": item.get("call_id", ""), "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.get("call_id", ""), "content": item.get("output")})
    return out


def lesson(episode: Episode) -> str | None:
    """The lesson the episode's error line spells out beside the code that ran (`code_lessons.from_error`):
    the most specific phrasing that restates nothing of this one task, or None where the error names
    nothing the failed code wrote. An episode paired across runs restates nothing of either task."""
    return _general(episode, code_lessons.from_error(episode.task, episode.failed, episode.error, episode.fixed,
                                                     episode.fixed_task))


def lesson_from_code(episode: Episode) -> str | None:
    """The lesson the code that ran spells out as a task's reference would (`code_lessons.from_reference`:
    "When computing ..., use np.tril(x)."), for an episode whose error names no fix (a wrong value): the
    most specific phrasing that restates nothing of either task, or None. Only where that code answered
    the same task, or one of the same kind almost word for word (`pairing.SAME`): nothing here checks
    that it answers this one."""
    return _general(episode, code_lessons.from_reference(episode.task, episode.failed, episode.fixed,
                                                         episode.fixed_task))


def _general(episode: Episode, texts: list[str]) -> str | None:
    problems = list(dict.fromkeys(p for p in (episode.task, episode.fixed_task) if p))
    for text in texts:
        if all(parse.experiences(text, 1, problem=p, reference=episode.fixed).items for p in problems):
            return text
    return None


def reflection(episode: Episode) -> str:
    """The reflector's prompt for an episode whose error line names no fix (`lesson` gave None): the
    learner's own comparison of attempts (`prompts.ADVANTAGE_CODE`), the code that ran as its reference."""
    summaries = f"1. {episode.failed.strip()} -> {episode.error}\n2. {episode.fixed.strip()} -> ran without an error"
    return prompts.ADVANTAGE_CODE.format(problem=episode.task, reference=episode.fixed.strip(), max_lessons=1,
                                         summaries=summaries, example=prompts.CODE_EXAMPLE)


def reflected(episode: Episode, reply: str) -> str | None:
    """The first lesson of the reflector's ``reply`` that restates nothing of the episode's task or code
    (`parse.experiences`, as the learner's reflector replies are read), or None."""
    parsed = parse.experiences(reply, 1, (prompts.CODE_EXAMPLE,), problem=episode.task, reference=episode.fixed)
    return parsed.items[0] if parsed.items else None
