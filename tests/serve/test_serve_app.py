"""The HTTP layer of `dso llm serve`, driven by the `openai` SDK, over a scripted model (no weights):
OpenAI's completion and chunk shapes, tool calls, and errors that name the field."""

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dsonet.serve import ServedModel, create_app
from dsonet.learn.llama_engine import Generated
from dsonet.serve.template import ChatTemplate

openai = pytest.importorskip("openai", reason="the learn extra installs the openai SDK")

QWEN = ChatTemplate((Path(__file__).parent / "qwen2.5_chat_template.jinja").read_text())
MODEL = "qwen2.5-coder-0.5b"
HI = [{"role": "user", "content": "hi"}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class Scripted:
    """Answers every sequence with the next scripted reply, streamed three characters a piece."""

    def __init__(self, *replies: str):
        self.replies, self.requests = list(replies), []

    def run(self, requests, intake=None):
        out = []
        for r in list(requests) + list(intake() if intake is not None else ()):
            self.requests.append(r)
            text = self.replies.pop(0)
            for i in range(0, len(text), 3):
                if r.on_text:
                    r.on_text(text[i:i + 3])
            out.append(Generated(text, len(text.split()), "stop"))
            r.on_done(out[-1])
        return out


def served(script: Scripted, n_ctx: int = 400) -> ServedModel:
    # a token a word: enough to count and to overflow the context with
    return ServedModel((MODEL, "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M"), n_ctx, 2, QWEN, lambda text: text.split(),
                       script.run)


@pytest.fixture
def client():
    def make(*replies: str, n_ctx: int = 400, token: str | None = None):
        script = Scripted(*replies)
        http = TestClient(create_app(served(script, n_ctx), token=token))
        http.__enter__()  # runs the lifespan: the worker starts
        made.append(http)
        sdk = openai.OpenAI(base_url="http://testserver/v1", api_key=token or "none", http_client=http, max_retries=0)
        return sdk, script, http

    made = []
    yield make
    for http in made:
        http.__exit__(None, None, None)


def test_a_chat_is_an_openai_completion_with_its_usage(client):
    sdk, script, _ = client("Hello there!")
    done = sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0, seed=3)
    assert done.choices[0].message.content == "Hello there!" and done.choices[0].finish_reason == "stop"
    assert done.usage.completion_tokens == 2 and done.usage.prompt_tokens == len(QWEN.render(HI).split())
    r = script.requests[0]
    assert (r.max_tokens, r.temperature, r.seed, r.grammar) == (8, 0.0, 3, None)


def test_a_streamed_chat_comes_in_chunks_that_add_up_to_the_reply_and_ends_with_done(client):
    sdk, _, http = client("Hello there!", "Hello there!")
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=HI, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    raw = http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "stream": True})
    assert raw.headers["content-type"].startswith("text/event-stream") and raw.text.endswith("data: [DONE]\n\n")


def test_a_required_call_is_forced_by_a_grammar_and_comes_back_as_tool_calls(client):
    sdk, script, _ = client(CALL)
    done = sdk.chat.completions.create(model=MODEL, messages=HI, tools=[WEATHER], tool_choice="required")
    (call,) = done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "tool_calls" and done.choices[0].message.content is None
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert '"\\"get_weather\\""' in script.requests[0].grammar


def test_a_streamed_call_is_sent_whole_once_it_closes_after_the_prose_before_it(client):
    sdk, _, _ = client(f"Checking.\n{CALL}")
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=HI, tools=[WEATHER], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert text == "Checking.\n" and "<tool" not in text
    assert [(t.index, t.function.name) for t in calls] == [(0, "get_weather")] and calls[0].id.startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_with_tool_choice_none_the_tools_stay_out_of_the_prompt_and_nothing_is_parsed(client):
    sdk, _, _ = client(CALL)
    done = sdk.chat.completions.create(model=MODEL, messages=HI, tools=[WEATHER], tool_choice="none")
    assert done.choices[0].message.content == CALL and not done.choices[0].message.tool_calls


def test_n_choices_are_n_sequences_with_their_own_seeds(client):
    sdk, script, _ = client("one", "two")
    done = sdk.chat.completions.create(model=MODEL, messages=HI, n=2, seed=7)
    assert [c.message.content for c in done.choices] == ["one", "two"] and [c.index for c in done.choices] == [0, 1]
    assert [r.seed for r in script.requests] == [7, 8]


def test_a_bad_body_is_a_400_in_openais_shape_naming_the_field(client):
    sdk, _, http = client()
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "x"}])
    assert info.value.body["param"] == "messages[0].role" and "expected one of" in info.value.body["message"]
    body = http.post("/v1/chat/completions", content=b"{not json").json()
    assert body["error"]["type"] == "invalid_request_error" and "not JSON" in body["error"]["message"]


def test_a_conversation_the_template_refuses_is_a_400_on_messages():
    strict = ChatTemplate("{{ raise_exception('Conversation roles must alternate') }}")
    model = ServedModel((MODEL,), 400, 1, strict, str.split, Scripted().run)
    with TestClient(create_app(model)) as http:
        error = http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI}).json()["error"]
    assert error["param"] == "messages" and error["message"].count("messages:") == 1
    assert "roles must alternate" in error["message"]


def test_an_unknown_model_is_a_404_that_names_the_served_one(client):
    sdk, _, _ = client()
    with pytest.raises(openai.NotFoundError) as info:
        sdk.chat.completions.create(model="gpt-4o", messages=HI)
    assert info.value.body["code"] == "model_not_found" and MODEL in info.value.body["message"]
    assert [m.id for m in sdk.models.list()] == [MODEL]


def test_a_prompt_longer_than_the_context_is_a_400_that_says_so(client):
    sdk, _, _ = client(n_ctx=60)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 100}])
    assert info.value.body["code"] == "context_length_exceeded" and "--n-ctx" in info.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="ask for at most"):
        sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=1000)


def test_generation_that_fails_is_a_500_and_a_stream_says_it_in_an_error_event(client):
    sdk, _, http = client()  # no reply scripted: the run raises
    with pytest.raises(openai.InternalServerError, match="generation failed"):
        sdk.chat.completions.create(model=MODEL, messages=HI)
    raw = http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "stream": True})
    assert '"error"' in raw.text and raw.text.endswith("data: [DONE]\n\n")


def test_with_a_token_every_route_but_health_wants_it_as_the_api_key(client):
    _, _, http = client("hi", token="s3cret")
    assert http.get("/health").json()["slots"] == 2
    refused = http.get("/v1/models")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert http.get("/v1/models", headers={"authorization": "Bearer s3cret"}).status_code == 200
