"""The coding agent of `dso bench agents`: a task, code, the code run, the result back, up to ``tries`` times.

Each try is one chat completion through the agent's own `dso proxy` (OpenAI's API over HTTP), so
the proxy sees exactly what a framework's traffic shows it: the task, every reply, and every
result as the next user turn. A reply's code runs in the sandbox (`dsonet.learn.drift.check`);
what the environment says goes back as the next user turn, as a test harness says it:

- the code raised: its error line ("AttributeError: module 'numpy' has no attribute 'trapz'");
- it ran but ``r`` is wrong or unassigned: an ``AssertionError`` line saying so, never the expected
  value (a wrong value is a failure, and the proxy must not read it as code that ran);
- it passed: a line without an error.

After the last try (passed, or tries used up) the loop still sends that result, asking for one
token: a framework sends a tool's output back to the model, and without it the proxy could not
tell whether the last attempt ran (an attempt whose result never came back is unknown to it).
That closing request is counted apart (``close_tokens``), since it writes no code.

The first try is greedy; a retry samples at ``retry_temperature`` (seeded by the try's number): the
same prompt answered greedily again writes the same line, and an agent that cannot vary its
attempt never fixes anything to learn from.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Callable, Protocol

import httpx

from dsonet.learn.context import SYSTEM
from dsonet.learn.drift import Check
from dsonet.learn.tasks import Task

INSTRUCTION = "Reply with the line of Python only, in a ```python block."
RETRY = "Write the line again, fixed, in a ```python block."
PASSED = "It ran, and r is what the task asks for."
CLOSE_TOKENS = 1  # the closing request only hands the last result to the proxy; its answer is not used
LESSONS_HEADER = "x-dso-lessons"
_ERROR_LINE = re.compile(r"^[A-Z]\w*(?:Error|Exception|Warning)\b")


@dataclass(frozen=True)
class Try:
    passed: bool
    said: str  # what the environment answered (the next user turn)
    tokens: int  # prompt + completion tokens of the request that wrote it (a framework's: all since the last try)
    lessons: tuple[str, ...]  # the ids the proxy injected into that request (X-DSO-Lessons)
    code: str = ""  # what the try wrote: the loop's reply, a framework's tool call's code


@dataclass(frozen=True)
class RunRecord:
    """One task worked through by one agent under one condition."""

    task_id: str
    agent: int
    tries: tuple[Try, ...]
    close_tokens: int
    messages: tuple[dict, ...]  # the run's whole history as the closing request sent it

    @property
    def solved(self) -> bool:
        return bool(self.tries) and self.tries[-1].passed

    @property
    def first_try(self) -> bool:
        return bool(self.tries) and self.tries[0].passed

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.tries)


class Solver(Protocol):
    """What the bench asks of an agent, the loop's or a framework's (`agent_smolagents.SmolAgent`)."""

    index: int

    def solve(self, task: Task) -> RunRecord: ...

    def close(self) -> None: ...


def environment_says(check: Check) -> str:
    """The user turn after a try: the error line, an assertion about ``r``, or that it passed."""
    if check.passed:
        return PASSED
    if _ERROR_LINE.match(check.feedback):
        return check.feedback
    return f"AssertionError: {check.feedback}"


class Agent:
    """One agent: its proxy's URL, the model it names, and how its code is run (``check``)."""

    def __init__(self, index: int, base_url: str, model: str, check: Callable[[Task, str], Check], tries: int = 3,
                 max_tokens: int = 48, retry_temperature: float = 0.7, timeout_s: float = 900.0):
        self.index, self.model, self.check, self.tries, self.max_tokens = index, model, check, tries, max_tokens
        self.retry_temperature = retry_temperature
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)

    def solve(self, task: Task) -> RunRecord:
        messages: list[dict] = [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": f"{task.question}\n{INSTRUCTION}"}]
        tries: list[Try] = []
        for k in range(self.tries):
            reply, tokens, lessons = self._complete(messages, self.max_tokens, self.retry_temperature if k else 0.0, k)
            check = self.check(task, reply)
            said = environment_says(check)
            tries.append(Try(check.passed, said, tokens, lessons, reply))
            last = check.passed or k == self.tries - 1
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": said if last else f"{said}\n{RETRY}"}]
            if check.passed:
                break
        _, close_tokens, _ = self._complete(messages, CLOSE_TOKENS)
        return RunRecord(task.id, self.index, tuple(tries), close_tokens, tuple(messages))

    def _complete(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
                  seed: int = 0) -> tuple[str, int, tuple[str, ...]]:
        """(the reply's text, its prompt + completion tokens, the lessons the proxy injected)."""
        reply = self.client.post("/chat/completions", json={"model": self.model, "messages": messages,
                                                            "max_tokens": max_tokens, "temperature": temperature,
                                                            "seed": seed})
        reply.raise_for_status()
        body = reply.json()
        usage = body.get("usage") or {}
        lessons = tuple(i for i in reply.headers.get(LESSONS_HEADER, "").split(",") if i)
        return (body["choices"][0]["message"].get("content") or "",
                int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)), lessons)

    def close(self) -> None:
        self.client.close()


def locked(check: Callable[[Task, str], Check]) -> Callable[[Task, str], Check]:
    """``check`` for agents on several threads: one sandbox worker runs one program at a time."""
    lock = threading.Lock()

    def run(task: Task, reply: str) -> Check:
        with lock:
            return check(task, reply)
    return run
