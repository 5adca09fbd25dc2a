"""`dso llm serve` on the embedded 0.5B, run as a user runs it (its own process) and driven by the `openai`
SDK: a chat, the same chat streamed, a required tool call, a bad body, `dso proxy` in front of it, and a
clean exit on SIGTERM. Answers are kept short (max_tokens <= 32) and greedy."""

import json
import signal
from pathlib import Path

import httpx
import pytest
from dso_process import Server

from dsonet.bench.proxy import Served, free_port
from dsonet.learn.chat import LLMError

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp")
openai = pytest.importorskip("openai")

MODEL = "qwen2.5-coder-0.5b"
QUESTION = [{"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": "Add the two-digit numbers 17 and 25. Reply with the number only."}]
RUN_PYTHON = {"type": "function", "function": {
    "name": "run_python", "description": "Run Python code and return what it prints",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}


@pytest.fixture(scope="module")
def server():
    from dsonet.learn.llama_llm import gguf_path

    try:
        gguf_path(MODEL)
    except LLMError as exc:
        pytest.skip(f"the embedded model is not installed: {exc}")
    port = free_port()
    proc = Server("llm", "serve", "--model", MODEL, "--port", str(port), "--slots", "2", "--threads", "1",
                  "--n-ctx", "1024")
    try:
        proc.banner()
        yield proc, f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.proc.poll() is None:
            proc.stop()


def _client(url: str):
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)


def test_it_says_where_it_listens_once_ready_and_reports_its_slots(server):
    proc, url = server
    assert proc.lines[-1] == f"dso llm serve listening on {url}"
    health = httpx.get(url.removesuffix("/v1") + "/health").json()
    assert (health["model"], health["slots"], health["n_ctx"]) == (MODEL, 2, 1024)


def test_a_chat_and_the_same_chat_streamed_give_the_same_greedy_answer(server):
    sdk = _client(server[1])
    done = sdk.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    assert "42" in done.choices[0].message.content and done.usage.completion_tokens > 0
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=8, temperature=0,
                                              stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == done.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == done.choices[0].finish_reason


def test_a_required_tool_call_comes_back_as_a_valid_call(server):
    sdk = _client(server[1])
    done = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Print 2**10 with Python."}], tools=[RUN_PYTHON],
        tool_choice="required", max_tokens=32, temperature=0)
    (call,) = done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "tool_calls" and call.function.name == "run_python"
    assert "code" in json.loads(call.function.arguments)


def test_a_bad_body_is_a_400_naming_the_field(server):
    with pytest.raises(openai.BadRequestError) as info:
        _client(server[1]).chat.completions.create(model=MODEL, messages=QUESTION, temperature=5)
    assert info.value.body["param"] == "temperature"


def test_dso_proxy_answers_through_it_with_the_lesson_injected(server, tmp_path):
    from dsonet.encoders.registry import load_encoder
    from dsonet.library import Library
    from dsonet.memory import LocalMemory
    from dsonet.proxy.app import create_app as create_proxy

    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=load_encoder("wordllama")))
    memory.add("When adding two two-digit numbers, add the tens first, then the ones", "math.arithmetic")
    with Served(create_proxy(memory, server[1], min_similarity=0.3, k=1)) as proxy:
        raw = _client(f"{proxy.url}/v1").chat.completions.with_raw_response.create(
            model=MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    memory.close()
    assert raw.headers["x-dso-lessons"] and raw.parse().choices[0].message.content


def test_the_kept_template_is_the_models_own():
    from dsonet.learn.llama_api import Model
    from dsonet.learn.llama_llm import gguf_path

    model = Model(gguf_path(MODEL))  # mapped, not read: under a second
    kept = (Path(__file__).parent / "qwen2.5_chat_template.jinja").read_text()
    assert model.chat_template() == kept


def test_sigterm_stops_it_cleanly(server):
    proc, _ = server
    lines = proc.stop()  # within 30 s, or it raises
    # uvicorn shuts down (the worker closes in the lifespan), then ends by the signal, as `dso proxy` does
    assert proc.proc.returncode == -signal.SIGTERM and not any("Traceback" in line for line in lines)
