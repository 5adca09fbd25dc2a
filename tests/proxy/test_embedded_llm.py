"""`dso proxy` in front of a real model: the embedded LLM (Qwen2.5-Coder-0.5B-Instruct via llama.cpp)
served locally behind a minimal OpenAI-compatible endpoint, asked through the `openai` client."""

import sys
from pathlib import Path

import openai
import pytest
from fastapi import FastAPI, Request

from dsonet.bench.proxy import Served
from dsonet.library import Library
from dsonet.memory import LocalMemory
from dsonet.proxy.app import create_app

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp")

LESSON = "When adding two two-digit numbers, add the tens first, then the ones, then combine them"
QUESTION = "Add the two-digit numbers 17 and 25. Reply with the number only."


@pytest.fixture(scope="module")
def llm():
    from dsonet.learn.llama_llm import embedded
    from dsonet.learn.chat import LLMError

    try:
        return embedded("qwen2.5-coder-0.5b")
    except LLMError as exc:
        pytest.skip(f"the embedded model is not installed: {exc}")


def served_model(llm) -> FastAPI:
    """Chat completions from the embedded model, keeping what it was sent."""
    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        app.state.requests.append(body)
        chat = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        (done,) = llm.generate([chat], n=1, temperature=body.get("temperature", 0.0),
                               max_tokens=body.get("max_tokens", 32))
        return {"id": "c1", "object": "chat.completion", "created": 0, "model": llm.name,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": done.texts[0]}}],
                "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens,
                          "total_tokens": done.tokens}}

    return app


def test_the_embedded_llm_answers_through_the_proxy_with_the_lesson_in_its_system_message(tmp_path, llm):
    from dsonet.encoders.registry import load_encoder

    memory = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=load_encoder("wordllama")))
    memory.add(LESSON, "math.arithmetic")
    memory.add("When a graph is sparse, store it as adjacency lists", "code.graphs")
    model = served_model(llm)
    with Served(model) as upstream, Served(create_app(memory, f"{upstream.url}/v1", min_similarity=0.3, k=1)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="local", max_retries=0, timeout=300)
        raw = client.chat.completions.with_raw_response.create(
            model="embedded", temperature=0.0, max_tokens=16,
            messages=[{"role": "system", "content": "You are a calculator."}, {"role": "user", "content": QUESTION}])
    memory.close()
    answer = raw.parse()
    system = model.state.requests[-1]["messages"][0]["content"]
    assert system.startswith("You are a calculator.") and LESSON in system and "graph" not in system
    assert raw.headers["x-dso-lessons"] and raw.headers["x-dso-retrieval-id"]
    assert "42" in answer.choices[0].message.content and answer.usage.completion_tokens > 0
