"""A chat request is checked once, at the boundary: a refusal names the field (OpenAI's ``param``) and the fix."""

import pytest

from dsonet.serve.request import BadRequest, parse_chat

MODELS = ("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M")
HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def chat(**fields):
    return parse_chat({"model": MODELS[0], "messages": HI} | fields, MODELS)


def refusal(**fields) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        parse_chat({"model": MODELS[0], "messages": HI} | fields, MODELS)
    return info.value


def test_defaults_are_openais_and_unused_fields_are_ignored():
    r = chat(top_p=0.9, user="me", presence_penalty=0)
    assert (r.temperature, r.max_tokens, r.stop, r.n, r.stream) == (1.0, None, (), 1, False)
    assert (r.tools, r.callable, r.required) == ([], (), False)


def test_a_model_not_served_here_is_a_404_that_names_the_one_that_is():
    e = refusal(model="gpt-4o")
    assert (e.status, e.param, e.code) == (404, "model", "model_not_found") and "'qwen2.5-coder-0.5b'" in str(e)
    assert chat(model=MODELS[1]).model == MODELS[1]  # the file's name is accepted too


@pytest.mark.parametrize("fields,param", [
    ({"model": None}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}, "messages[1].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({"temperature": 3}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"n": 0}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": "always"}, "tool_choice"),
])
def test_a_bad_field_is_a_400_naming_it(fields, param):
    e = refusal(**fields)
    assert (e.status, e.param) == (400, param) and str(e).startswith(f"{param}: ")


def test_max_completion_tokens_wins_over_the_older_max_tokens():
    assert chat(max_tokens=5, max_completion_tokens=9).max_tokens == 9


def test_tool_choice_decides_what_may_be_called_and_whether_a_call_is_required():
    assert (chat(tools=[TOOL]).callable, chat(tools=[TOOL]).required) == (("get_time",), False)
    assert chat(tools=[TOOL], tool_choice="required").required
    named = chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert (named.callable, named.required) == (("get_time",), True)
    none = chat(tools=[TOOL], tool_choice="none")
    assert (none.callable, none.tools) == ((), [])  # the prompt leaves the tools out: the model calls none


def test_usage_is_streamed_only_when_asked_for_on_a_stream():
    assert chat(stream=True, stream_options={"include_usage": True}).include_usage
    assert not chat(stream_options={"include_usage": True}).include_usage
