"""`dso bench agents --framework smolagents`: the adapter's bookkeeping around smolagents' real, unmodified
`ToolCallingAgent`. Its upstream is an instrument that replays fixed chat completions (tool calls, a
reply without one) with usage and an X-DSO-Lessons header, as a proxy would send them; the model never
runs here. What the agent wrote reaches the ``check`` it was given, and what that said comes back as the
tool's output."""

import sys

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from dsonet.bench.agent_loop import CLOSE_TOKENS, PASSED
from dsonet.bench.agents_fleet import agent_type
from dsonet.bench.proxy import Served
from dsonet.learn import drift
from dsonet.learn.drift import Check
from dsonet.learn.episodes import episodes

TASK = drift.instances(drift.FACTS_BY_ID["numpy-trapz"], 1, seed=0)[0]
STALE, FIXED = TASK.entry["stale"], TASK.entry["reference"]
REFUSED = "AttributeError: module 'numpy' has no attribute 'trapz'"


@pytest.fixture
def smol():
    pytest.importorskip("smolagents")
    return agent_type("smolagents")


def call(code: str) -> dict:
    return {"tool_calls": [{"id": "call_0", "type": "function",
                            "function": {"name": "run_python", "arguments": f'{{"code": "{code}"}}'}}]}


def replaying(replies: list[dict]) -> FastAPI:
    """Answers request n with ``replies[n]`` (the last one again past the end): 100 prompt and 10 completion
    tokens each, and lessons "L<n>" as the proxy's header names them; keeps each body."""
    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        app.state.requests.append(await request.json())
        n = len(app.state.requests)
        message = {"role": "assistant", "content": None} | replies[min(n, len(replies)) - 1]
        body = {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
        return JSONResponse(body, headers={"X-DSO-Lessons": f"L{n}"})
    return app


def refusing_trapz(ran: list[str]):
    """The sandbox's verdicts without a sandbox: the stale line is refused, anything else passes."""
    def check(task, code: str) -> Check:
        ran.append(code)
        return Check(False, REFUSED, code) if "trapz" in code else Check(True, "r is correct", code)
    return check


def solve(smol, replies: list[dict], tries: int):
    ran: list[str] = []
    upstream = replaying(replies)
    with Served(upstream) as server:
        agent = smol(3, f"{server.url}/v1", "m", refusing_trapz(ran), tries=tries, max_tokens=48)
        record = agent.solve(TASK)
        agent.close()
    return record, ran, upstream.state.requests


def test_each_tool_call_is_a_try_and_the_run_closes_one_step_after_the_pass(smol):
    final = {"tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "final_answer", "arguments": '{"answer": "done"}'}}]}
    record, ran, bodies = solve(smol, [call(STALE), call(FIXED), final], tries=3)
    assert ran == [STALE, FIXED]  # smolagents' calls ran through the check it was given
    assert [t.passed for t in record.tries] == [False, True] and not record.first_try and record.solved
    assert [t.said for t in record.tries] == [REFUSED, PASSED] and [t.code for t in record.tries] == [STALE, FIXED]
    assert [t.lessons for t in record.tries] == [("L1",), ("L2",)]  # each try's own request's header
    assert [t.tokens for t in record.tries] == [110, 110] and record.close_tokens == 110 and record.agent == 3
    # three requests: two tries and the step that hands the passing result to the proxy, asking for one token
    assert len(bodies) == 3 and record.messages == tuple(bodies[-1]["messages"])
    assert [b["temperature"] for b in bodies] == [0.0, 0.7, 0.0] and [b["seed"] for b in bodies] == [0, 1, 0]
    assert bodies[0]["max_tokens"] > 48 and bodies[-1]["max_tokens"] == CLOSE_TOKENS
    assert bodies[0]["tool_choice"] == "required" and {t["function"]["name"] for t in bodies[0]["tools"]} == \
        {"run_python", "final_answer"}
    assert PASSED in str(bodies[-1]["messages"][-1]["content"])
    # the proxy's reader finds the episode in smolagents' own record of what it ran
    (episode,) = episodes(list(record.messages))
    assert (episode.failed, episode.error, episode.fixed) == (STALE, REFUSED, FIXED)


def test_a_call_in_the_closing_step_is_not_run_and_is_no_try(smol):
    record, ran, bodies = solve(smol, [call(FIXED), call(FIXED)], tries=3)
    assert ran == [FIXED] and [t.passed for t in record.tries] == [True] and record.first_try
    assert len(bodies) == 2 and record.close_tokens == 110


def test_steps_without_a_run_cost_a_try_and_smolagents_own_last_request_closes(smol):
    untried = '{"answer": "r = np.trapz(z, samples)"}'
    answer = {"tool_calls": [{"id": "call_1", "type": "function",
                              "function": {"name": "final_answer", "arguments": untried}}]}
    record, ran, bodies = solve(smol, [{"content": "I will compute it."}, call(STALE), answer], tries=3)
    assert ran == [STALE] and [t.passed for t in record.tries] == [False] and not record.solved
    # a reply smolagents could not parse (before the try) and two final answers refused before any pass (after
    # it, the model reading the refusal): their requests count toward the one try
    assert [t.tokens for t in record.tries] == [110 * 4] and [t.lessons for t in record.tries] == [("L2",)]
    assert "run_python first" in str(bodies[3]["messages"])
    # greedy until the try failed; then each request is seeded by its number, so a refused answer is not
    # sampled the same way again
    assert [b["temperature"] for b in bodies[:4]] == [0.0, 0.0, 0.7, 0.7] and [b["seed"] for b in bodies[:4]] == \
        [0, 0, 2, 3]
    # max_steps (tries + 1) ran out before the tries did; smolagents' own final request carried the last result
    assert len(bodies) == 5 and "tools" not in bodies[-1] and record.close_tokens == 110
    assert REFUSED in str(bodies[-1]["messages"])


def test_code_that_does_not_parse_gets_pythons_own_error_line(smol):
    broken = STALE + "}"  # the 0.5B's calls ended on a stray brace: the bench's check finds no code in it
    record, ran, bodies = solve(smol, [call(broken), call(FIXED)], tries=3)
    assert ran == [broken, FIXED] and record.tries[0].said == "SyntaxError: unmatched '}'"
    assert "SyntaxError: unmatched '}'" in str(bodies[1]["messages"])  # what the model read next


def test_a_missing_smolagents_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "smolagents", None)  # what importing an uninstalled package raises
    monkeypatch.delitem(sys.modules, "dsonet.bench.agent_smolagents", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'dsonet\[frameworks\]'"):
        agent_type("smolagents")
    assert agent_type("loop").__name__ == "Agent"
