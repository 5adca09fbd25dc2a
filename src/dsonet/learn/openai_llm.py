"""Any OpenAI-compatible chat server (vLLM, Ollama, llama.cpp's server, OpenAI) via the `openai` client.

Requests run concurrently, up to ``max_concurrency`` at a time, so a batch of queries keeps
a vLLM cluster's batcher full. Each request carries ``n`` so the server samples the group
in one pass; servers that ignore ``n`` (llama.cpp's answers with one choice) are topped up
with further requests. The client's own retry loop (exponential backoff on connection
errors, 408/409/429/5xx) and per-request timeout are used rather than a second one.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from dsonet.learn.chat import Chat, Completion, LLMError, check_args


class OpenAILLM:
    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 120.0,
                 max_retries: int = 4, max_concurrency: int = 16):
        import openai

        if max_concurrency < 1:
            raise LLMError(f"max_concurrency: {max_concurrency}; allow at least 1 request in flight")
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "none"),
                                     timeout=timeout, max_retries=max_retries)
        self._errors = (openai.APIError,)
        self.base_url = base_url
        self.model = model
        self.max_concurrency = max_concurrency

    @property
    def name(self) -> str:
        return self.model

    def _one(self, chat: Chat, n: int, temperature: float, max_tokens: int, seed: int | None) -> Completion:
        texts: list[str] = []
        prompt_tokens = completion_tokens = 0
        while len(texts) < n:
            try:
                resp = self._client.chat.completions.create(
                    model=self.model, messages=list(chat), n=n - len(texts), temperature=temperature,
                    max_tokens=max_tokens, **({"seed": seed + len(texts)} if seed is not None else {}))
            except self._errors as exc:
                raise LLMError(f"LLM server {self.base_url} (model {self.model!r}) failed after retries: {exc}") from exc
            if not resp.choices:
                raise LLMError(f"LLM server {self.base_url} returned no choices for model {self.model!r}")
            texts += [(c.message.content or "").strip() for c in resp.choices]
            if resp.usage is not None:
                prompt_tokens = resp.usage.prompt_tokens
                completion_tokens += resp.usage.completion_tokens
        return Completion(tuple(texts[:n]), prompt_tokens, completion_tokens)

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None) -> list[Completion]:
        check_args(chats, n, temperature, max_tokens)
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(len(chats), 1))) as pool:
            return list(pool.map(lambda c: self._one(c, n, temperature, max_tokens, seed), chats))
