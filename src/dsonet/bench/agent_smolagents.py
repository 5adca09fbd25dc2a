"""smolagents as an agent of `dso bench agents`: its own `ToolCallingAgent`, unmodified, as a drop-in for
the bench's loop (`agent_loop.Agent`: the same constructor, ``solve(task) -> RunRecord``, ``close()``).

smolagents is configured only by its agent's proxy's URL (`OpenAIServerModel`, ``api_base``) and
given one tool, ``run_python(code)``, which runs the code through the bench's ``check`` (the drift
family's sandbox under `.venv-drift`, where the libraries a task is about are installed) and answers
what the loop's next user turn says (`agent_loop.environment_says`). Not its `CodeAgent`: that runs
code in smolagents' own interpreter under the bench's venv, not where the drift facts hold.

- What a user would configure besides: ``instructions`` (added to smolagents' own system prompt) saying
  to run the line with the tool, and a ``final_answer_checks`` entry that refuses a final answer before
  a try has passed (the 0.5B, so told, still answered with lines it never ran); smolagents' prompts
  are its own (the first request's prompt is ~1,280 tokens with the tool's schema, the loop's ~150).
- Each ``run_python`` call is a try: its check's verdict, what it answered, and the tokens and
  injected lessons of the requests that led to it (every request since the previous try: a step
  that wrote no call, as a reply smolagents could not parse or a refused final answer, costs the
  next try its tokens, or the last try's where none followed, and one of the ``tries + 1`` steps).
- The run stops once a try passes or ``tries`` tries are made, after one more step: smolagents sends
  the last tool result back in its next request, which hands it to the proxy as the loop's closing
  request does; that request's tokens are ``close_tokens``. So ``max_steps`` is ``tries + 1``, and a
  run whose steps ran out first ends on smolagents' own final request, which carries the last result
  too and is its closing request (a run without a try counts all its tokens there).
- Tokens come from the ``usage`` of each response and lessons from its ``X-DSO-Lessons`` header, read
  by a response hook on the OpenAI client's HTTP client (``client_kwargs={"http_client": ...}``),
  which also keeps each request's messages as sent (the last one is the run's ``messages``).
- The first request is greedy and a retry samples at ``retry_temperature``, as in the loop, seeded by
  the request's number in the run: a step that follows a refused answer is not sampled as the step
  before it was (seeded by the try's number, the 1.5B wrote the same refused ``final_answer`` word for
  word until its steps ran out). smolagents forwards its model's ``kwargs`` with every request, so they
  are set before each one. The closing request asks for ``CLOSE_TOKENS``, like the loop's.
- A call's JSON around the line costs tokens the loop's fence does not: a try may write
  ``max_tokens + TOOL_CALL_TOKENS``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import openai
from smolagents import ActionStep, LogLevel, OpenAIServerModel, Tool, ToolCallingAgent

from dsonet.bench.agent_loop import CLOSE_TOKENS, LESSONS_HEADER, RunRecord, Try, environment_says
from dsonet.learn.drift import Check
from dsonet.learn.tasks import Task

# <tool_call>{"name": "run_python", "arguments": {"code": "..."}}</tool_call> around the line, its newlines and
# quotes escaped: with 32 the 0.5B's calls were cut before the JSON closed whenever it restated a line of setup
TOOL_CALL_TOKENS = 64
# smolagents' own system prompt, plus what a user would tell it about the tool
INSTRUCTIONS = ("Solve the task by running your line of Python with the run_python tool. The task's code has already "
                "run there: write only the new line. The tool says whether r is what the task asks for; if not, fix "
                "the line and run it again. Call final_answer only once run_python has said that r is right.")
OVER = "The run is over."  # a call after the run closed: no request follows, so nothing reads it


class RunPython(Tool):
    name = "run_python"
    description = ("Runs Python after the task's code and says what happened: the error line, or whether r is what "
                   "the task asks for.")
    inputs = {"code": {"type": "string", "description": "The line of Python to run."}}
    output_type = "string"

    def __init__(self, run: Callable[[str], str]):
        super().__init__()
        self.run = run

    def forward(self, code: str) -> str:
        return self.run(code)


@dataclass
class _Run:
    """One task's run so far, written by the tool and by the HTTP client's response hook."""

    task: Task
    tries: list[Try] = field(default_factory=list)
    tokens: int = 0  # of the requests since the last try
    last_tokens: int = 0  # of the last request
    lessons: tuple[str, ...] = ()  # injected into the last request
    messages: tuple[dict, ...] = ()  # the last request's, as sent
    requests: int = 0  # sent so far
    closed: bool = False  # a try passed, or the tries are used up
    close_sent: bool = False  # and a request has carried its result since


class SmolAgent:
    """One agent: smolagents' `ToolCallingAgent` through its proxy at ``base_url``, its code run by ``check``."""

    def __init__(self, index: int, base_url: str, model: str, check: Callable[[Task, str], Check], tries: int = 3,
                 max_tokens: int = 48, retry_temperature: float = 0.7, timeout_s: float = 900.0):
        self.index, self.check, self.tries, self.max_tokens = index, check, tries, max_tokens
        self.retry_temperature = retry_temperature
        self.http = openai.DefaultHttpxClient(timeout=timeout_s, event_hooks={"response": [self._answered]})
        # no retries: a request sent twice would reach the proxy twice and count twice here
        self.model = OpenAIServerModel(model_id=model, api_base=base_url, api_key="none",
                                       client_kwargs={"http_client": self.http, "max_retries": 0})
        self.agent = ToolCallingAgent(tools=[RunPython(self._run_python)], model=self.model, instructions=INSTRUCTIONS,
                                      max_steps=tries + 1, final_answer_checks=[self._ran_first],
                                      verbosity_level=LogLevel.OFF)
        self._run: _Run | None = None
        self._lock = threading.Lock()  # smolagents runs a reply's several calls on threads of its own

    def solve(self, task: Task) -> RunRecord:
        self._run = run = _Run(task)
        self._sample(run)
        for step in self.agent.run(task.question, stream=True, max_steps=self.tries + 1):
            if isinstance(step, ActionStep) and run.close_sent:
                break  # the last try's result reached the proxy; smolagents' own final request is not needed
        self._run = None
        if not run.tries:
            return RunRecord(task.id, self.index, (), run.tokens, run.messages)
        *before, last = run.tries
        last = replace(last, tokens=last.tokens + run.tokens - run.last_tokens)  # steps wasted after it
        return RunRecord(task.id, self.index, (*before, last), run.last_tokens, run.messages)

    def _run_python(self, code: str) -> str:
        """The tool: one try, unless the run is closed."""
        run = self._run
        with self._lock:
            if run is None or run.closed:
                return OVER
            check = self.check(run.task, code)
            said = _syntax_error(code) or environment_says(check)
            run.tries.append(Try(check.passed, said, run.tokens, run.lessons, code))
            run.tokens = 0
            run.closed = check.passed or len(run.tries) == self.tries
            self._sample(run)
            return said

    def _ran_first(self, answer: Any, memory: Any) -> bool:
        """smolagents' check before it accepts a final answer: refused, it is an error the model reads next step."""
        if self._run is None or not any(t.passed for t in self._run.tries):
            raise AssertionError("run your line with run_python first; answer once it says r is what the task asks for")
        return True

    def _sample(self, run: _Run) -> None:
        """How the next request samples: greedy until a try has failed and once the run is closed,
        otherwise at ``retry_temperature`` with the next request's number as its seed."""
        retry = bool(run.tries) and not run.closed
        self.model.kwargs.update(max_tokens=CLOSE_TOKENS if run.closed else self.max_tokens + TOOL_CALL_TOKENS,
                                 temperature=self.retry_temperature if retry else 0.0,
                                 seed=run.requests if retry else 0)

    def _answered(self, response: Any) -> None:
        """The response hook: the request's tokens, injected lessons and messages, into the run."""
        run = self._run
        if run is None or not response.is_success or not response.url.path.endswith("/chat/completions"):
            return
        response.read()
        usage = response.json().get("usage") or {}
        with self._lock:
            run.last_tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
            run.tokens += run.last_tokens
            run.lessons = tuple(i for i in response.headers.get(LESSONS_HEADER, "").split(",") if i)
            run.messages = tuple(json.loads(response.request.content).get("messages", ()))
            run.close_sent = run.closed
            run.requests += 1
            self._sample(run)  # a step that runs no tool (a refused answer) is followed by a request of its own

    def close(self) -> None:
        self.http.close()


def _syntax_error(code: str) -> str | None:
    """Python's own line for a tool call's code that does not parse: a tool runs the code it is given, where the
    bench's check reads code leniently out of a chat reply and would say only that it found none."""
    try:
        compile(code, "<run_python>", "exec")
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg}"
    return None
