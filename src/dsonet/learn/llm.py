"""An LLM by name: the embedded model, a local file or folder, or an OpenAI-compatible server.

Every back end answers the chat protocol of `dsonet.learn.chat`; their heavy libraries (llama.cpp,
transformers, openai) are imported when a model is loaded, so opening none costs nothing.
"""

from __future__ import annotations

import os

from dsonet.learn.chat import ChatLLM, LLMError
from dsonet.learn.llama_llm import DEFAULT_MODEL, MODELS, LlamaCppLLM, embedded
from dsonet.learn.local_llm import LocalLLM, smollm2
from dsonet.learn.openai_llm import OpenAILLM


def open_llm(url: str | None = None, model: str | None = None, **options) -> ChatLLM:
    """The embedded model when ``url`` is None or "local", else an OpenAI-compatible server.

    With ``url`` None, ``OPENAI_BASE_URL`` (when set) names the server. Locally, ``model`` is an
    embedded model's key (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``, ``smollm2``; default
    `DEFAULT_MODEL`), a .gguf file (run by llama.cpp) or a Hugging Face folder (transformers).
    """
    url = url or os.environ.get("OPENAI_BASE_URL") or None
    if url is None or url == "local":
        if model is None or model in MODELS:
            return embedded(model or DEFAULT_MODEL, options.get("threads"))
        if model == "smollm2":
            return smollm2()
        if model.endswith(".gguf"):
            return LlamaCppLLM(model, threads=options.get("threads"))
        return LocalLLM.from_path(model)
    model = model or os.environ.get("OPENAI_MODEL")
    if not model:
        raise LLMError(f"model: a server at {url} needs a served model name; pass --model NAME (or set OPENAI_MODEL)")
    return OpenAILLM(url, model, **{k: v for k, v in options.items() if k != "threads"})
