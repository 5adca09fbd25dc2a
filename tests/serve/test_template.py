"""The model's own chat template rendered with jinja2: tools, tool calls and tool results as Qwen2.5 expects.
The template is the one the 0.5B's GGUF carries (`tokenizer.chat_template`), kept beside the tests so these
run without the weights; tests/serve/test_served_model.py checks it is still the model's."""

import json
from pathlib import Path

import pytest

from dsonet.serve.template import ChatTemplate, TemplateError

QWEN = ChatTemplate((Path(__file__).parent / "qwen2.5_chat_template.jinja").read_text())
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def test_a_plain_chat_renders_as_chatml_ending_in_the_assistants_turn():
    prompt = QWEN.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_without_a_system_message_the_templates_own_default_is_used():
    assert QWEN.render([{"role": "user", "content": "Hi"}]).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")


def test_tools_are_written_into_the_system_message_as_json_in_their_own_key_order_unescaped():
    prompt = QWEN.render([{"role": "user", "content": "Weather in Paris?"}], [WEATHER])
    assert "<tools>\n" + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>" in prompt
    assert "Weather <now> & later" in prompt  # jinja2's own tojson would write \u003cnow\u003e
    assert "<tool_call>\n{\"name\": <function-name>" in prompt


def test_an_assistants_tool_call_renders_its_json_string_arguments_as_an_object():
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    prompt = QWEN.render([{"role": "user", "content": "Weather?"},
                          {"role": "assistant", "content": None, "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}], [WEATHER])
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>') in prompt
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in prompt


def test_content_parts_are_joined_and_developer_is_a_system_message():
    prompt = QWEN.render([{"role": "developer", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                       {"type": "text", "text": "you"}]}])
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi you<|im_end|>")


def test_a_template_that_refuses_a_conversation_says_so():
    strict = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('start with a user') }}{% endif %}")
    with pytest.raises(TemplateError, match="messages: .*start with a user"):
        strict.render([{"role": "system", "content": "x"}])


def test_a_template_that_does_not_compile_is_an_error_at_start():
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% if %}")
