"""Qwen2.5's <tool_call> blocks read into OpenAI's tool_calls, held back while streamed, forced by a grammar."""

import json

from dsonet.serve.tools import ToolCallStream, parse_tool_calls, tool_grammar

NAMES = ("get_weather", "get_time")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_a_call_becomes_an_openai_tool_call_with_json_string_arguments_and_no_content():
    content, calls = parse_tool_calls(CALL, NAMES)
    assert content is None and len(calls) == 1
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_text_around_calls_is_the_content_and_every_call_is_read():
    second = CALL.replace("get_weather", "get_time").replace('"city": "Paris"', "")
    content, calls = parse_tool_calls(f"Let me look.\n{CALL}\n{second}", NAMES)
    assert content == "Let me look." and [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert calls[1]["function"]["arguments"] == "{}" and calls[0]["id"] != calls[1]["id"]


def test_a_block_naming_an_undeclared_tool_or_holding_no_json_stays_content():
    text = CALL.replace("get_weather", "rm_rf") + "<tool_call>\nnot json\n</tool_call>"
    assert parse_tool_calls(text, NAMES) == (text, [])


def test_a_last_block_left_unclosed_counts_when_its_json_is_whole():
    content, calls = parse_tool_calls(CALL.removesuffix("\n</tool_call>"), NAMES)
    assert content is None and calls[0]["function"]["name"] == "get_weather"


def test_a_reply_that_is_only_the_calls_json_bare_or_fenced_is_a_call():
    for text in ['{"name": "get_time", "arguments": {}}', '```json\n{"name": "get_time", "arguments": {}}\n```']:
        content, calls = parse_tool_calls(text, NAMES)
        assert content is None and calls[0]["function"]["name"] == "get_time"
    prose = 'Use {"name": "get_time", "arguments": {}} to call it.'
    assert parse_tool_calls(prose, NAMES) == (prose, [])


def test_arguments_sent_as_a_string_pass_through_unchanged():
    text = '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}</tool_call>'
    _, calls = parse_tool_calls(text, NAMES)
    assert calls[0]["function"]["arguments"] == '{"tz": "UTC"}'


def test_a_streamed_reply_sends_prose_at_once_and_holds_the_call_until_it_closes():
    stream = ToolCallStream(NAMES)
    pieces = ["Sure", ". <tool", '_call>\n{"name": ', '"get_time", "arguments": {}}\n</tool_call>']
    sent = [stream.feed(p) for p in pieces]
    assert sent == ["Sure", ". ", "", ""]
    content, calls = stream.close()
    assert content is None and calls[0]["function"]["name"] == "get_time"


def test_a_held_partial_tag_that_turns_out_not_to_be_one_is_sent():
    stream = ToolCallStream(NAMES)
    assert stream.feed("a <to") == "a "
    assert stream.feed("y> b") == "<toy> b"
    assert stream.close() == (None, [])


def test_a_streamed_reply_that_may_be_a_bare_call_is_held_and_prose_is_not():
    stream = ToolCallStream(NAMES)
    assert [stream.feed(p) for p in ["``", "`json\n", '{"name": "get_time", "arguments": {}}\n```']] == ["", "", ""]
    assert stream.close()[1][0]["function"]["name"] == "get_time"
    code = ToolCallStream(NAMES)
    assert [code.feed(p) for p in ["``", "`python\nx = 1"]] == ["", "```python\nx = 1"]


def test_without_tools_every_piece_is_content_even_a_tag():
    stream = ToolCallStream(())
    assert stream.feed(CALL) == CALL and stream.close() == (None, [])


def test_the_grammar_forces_one_block_naming_only_the_allowed_functions():
    grammar = tool_grammar(NAMES)
    root, name = grammar.splitlines()[:2]
    assert root.startswith('root ::= "<tool_call>\\n{\\"name\\": " name ", \\"arguments\\": " object')
    assert root.endswith('"}\\n</tool_call>"')
    assert name == 'name ::= "\\"get_weather\\"" | "\\"get_time\\""'
    assert "object ::=" in grammar and "string ::=" in grammar
