"""Episodes read off an agent's history: tool calls, fenced blocks (smolagents), Responses items."""

import json

from dsonet.learn.episodes import Attempt, attempts, episodes, lesson, responses_messages

TASK = ("The code below has run (Python 3.11, numpy 2.4.6).\n```python\nimport numpy as np\nx = np.linspace(0, 1, 11)\n"
        "y = x ** 2\n```\nWrite one line of Python that assigns to r the integral of y over x by the trapezoidal rule.")
REFUSED = "Traceback (most recent call last):\n  File \"<code>\", line 1\nAttributeError: module 'numpy' has no attribute 'trapz'"


def call(cid: str, code: str) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": code})}}]}


def tool(cid: str, result: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": result}


def run(*turns) -> list[dict]:
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": TASK}, *turns]


def test_a_failed_tool_call_then_one_that_ran_is_an_episode_and_its_error_line_the_lesson():
    (ep,) = episodes(run(call("c1", "r = np.trapz(y, x)"), tool("c1", REFUSED), call("c2", "r = np.trapezoid(y, x)"),
                         tool("c2", "0.335")))
    assert (ep.failed, ep.error, ep.fixed) == ("r = np.trapz(y, x)", "AttributeError: module 'numpy' has no attribute 'trapz'",
                                               "r = np.trapezoid(y, x)")
    text = lesson(ep)
    assert text.startswith("When computing the integral") and "use np.trapezoid" in text and "not np.trapz" in text


def test_the_last_attempt_without_a_result_is_unknown_not_a_success():
    history = run(call("c1", "r = np.trapz(y, x)"), tool("c1", REFUSED), call("c2", "r = np.trapezoid(y, x)"))
    assert episodes(history) == []
    assert attempts(history)[-1] == Attempt("r = np.trapezoid(y, x)", None, "c2", 4) and not attempts(history)[-1].ran


def test_a_resent_history_gives_the_same_episode_key():
    turns = [call("c1", "r = np.trapz(y, x)"), tool("c1", REFUSED), call("c2", "r = np.trapezoid(y, x)"), tool("c2", "0.335")]
    first = episodes(run(*turns))
    again = episodes(run(*turns, {"role": "assistant", "content": "Done: r = 0.335"}, {"role": "user", "content": "thanks"}))
    assert [e.key for e in first] == [e.key for e in again]


def test_smolagents_fenced_code_and_its_observation_in_the_next_user_turn():
    history = [{"role": "user", "content": TASK},
               {"role": "assistant", "content": "Thought: integrate.\nCode:\n```py\nr = np.trapz(y, x)\n```<end_code>"},
               {"role": "user", "content": "Call id: call_1\nError:\nCode execution failed at line 'r = np.trapz(y, x)' due to: "
                                           "AttributeError: module 'numpy' has no attribute 'trapz'"},
               {"role": "assistant", "content": "Code:\n```py\nr = np.trapezoid(y, x)\n```<end_code>"},
               {"role": "user", "content": "Observation:\nExecution logs:\nLast output from code snippet:\n0.335"}]
    (ep,) = episodes(history)
    assert ep.error == "AttributeError: module 'numpy' has no attribute 'trapz'" and ep.fixed == "r = np.trapezoid(y, x)"


def smolagents_turn(thought_and_blocks: str, ran: str, n: int) -> dict:
    """An assistant turn as smolagents 1.26 resends it: the model's reply, then its record of what it ran."""
    record = [{"id": f"call_{n}", "type": "function", "function": {"name": "python_interpreter", "arguments": ran}}]
    return {"role": "assistant", "content": [{"type": "text", "text": f"{thought_and_blocks}</code>\nCalling tools:\n{record}"}]}


def test_smolagents_calling_tools_record_is_the_attempt_not_each_block_of_the_reply():
    reply = "Thought: integrate.\n```python\nimport numpy as np\n```\nthen\n```python\nprint(np.trapz(y, x))\n```"
    history = [{"role": "user", "content": TASK}, smolagents_turn(reply, "import numpy as np\n\nprint(np.trapz(y, x))", 1)]
    assert [a.code for a in attempts(history)] == ["import numpy as np\n\nprint(np.trapz(y, x))"]


def test_a_replys_blocks_are_one_attempt_as_smolagents_runs_them():
    reply = {"role": "assistant", "content": "```python\nimport numpy as np\n```\nand\n<code>\nprint(np.trapz(y, x))\n</code>"}
    assert [a.code for a in attempts([reply])] == ["import numpy as np\n\nprint(np.trapz(y, x))"]


def test_smolagents_answer_stopped_at_its_closing_tag_is_still_an_attempt():
    answer = {"role": "assistant", "content": "Thought: integrate.\n<code>\nprint(np.trapezoid(y, x))"}
    assert [a.code for a in attempts([answer])] == ["print(np.trapezoid(y, x))"]


def test_smolagents_interpreter_attribute_error_reads_as_pythons_and_spells_out_the_lesson():
    refused = ("Call id: call_1\nError:\nCode execution failed at line 'print(np.trapz(y, x))' due to: InterpreterError: "
               "Object <module 'numpy' from '/venv/numpy/__init__.py'> has no attribute trapz\nNow let's retry: take care "
               "not to repeat previous errors! If you have retried several times, try a completely different approach.\n")
    history = [{"role": "user", "content": TASK},
               smolagents_turn("```python\nprint(np.trapz(y, x))\n```", "print(np.trapz(y, x))", 1),
               {"role": "user", "content": [{"type": "text", "text": refused}]},
               smolagents_turn("```python\nprint(np.trapezoid(y, x))\n```", "print(np.trapezoid(y, x))", 2),
               {"role": "user", "content": [{"type": "text", "text": "Call id: call_2\nObservation:\nExecution logs:\n0.335\n"
                                                                      "Last output from code snippet:\nNone"}]}]
    (ep,) = episodes(history)
    assert ep.error == "AttributeError: module 'numpy' has no attribute 'trapz'"
    assert "use np.trapezoid" in lesson(ep) and "not np.trapz" in lesson(ep)


def test_responses_function_calls_read_as_tool_calls():
    body = {"input": [{"type": "message", "role": "user", "content": TASK},
                      {"type": "function_call", "call_id": "f1", "name": "python", "arguments": json.dumps({"code": "r = np.trapz(y, x)"})},
                      {"type": "function_call_output", "call_id": "f1", "output": REFUSED},
                      {"type": "function_call", "call_id": "f2", "name": "python", "arguments": json.dumps({"code": "r = np.trapezoid(y, x)"})},
                      {"type": "function_call_output", "call_id": "f2", "output": "0.335"}]}
    (ep,) = episodes(responses_messages(body))
    assert ep.fixed == "r = np.trapezoid(y, x)"


def test_an_error_that_names_nothing_the_code_wrote_gives_no_rule_lesson():
    (ep,) = episodes(run(call("c1", "r = sum(y)"), tool("c1", "ValueError: the answer was wrong"),
                         call("c2", "r = np.trapezoid(y, x)"), tool("c2", "0.335")))
    assert lesson(ep) is None
