"""What the server needs of a model: its names, its context and slots, its template, a tokenizer and ``run``.

`ServedModel.of(llm)` builds it from the embedded llama.cpp model; tests build one from plain
functions, so the HTTP layer is tested without loading weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dsonet.learn.llama_engine import Generated
from dsonet.learn.llama_llm import LlamaCppLLM
from dsonet.serve.template import ChatTemplate


@dataclass(frozen=True)
class ServedModel:
    names: tuple[str, ...]  # what clients may call it; the first is the id /v1/models lists
    n_ctx: int  # tokens of prompt + answer one sequence may hold
    slots: int  # sequences decoded together
    template: ChatTemplate
    tokenize: Callable[[str], list[int]]  # a rendered prompt (special tokens parsed) -> token ids
    run: Callable[..., list[Generated]]  # run(requests, intake=None): one result each, in order (`LlamaCppLLM.run`)

    @property
    def id(self) -> str:
        return self.names[0]

    @classmethod
    def of(cls, llm: LlamaCppLLM, name: str | None = None) -> "ServedModel":
        """The embedded model; ``name`` (say its key, qwen2.5-coder-0.5b) is listed first, its file's name too."""
        return cls(names=tuple(dict.fromkeys(n for n in (name, llm.name) if n)), n_ctx=llm.n_ctx, slots=llm.slots,
                   template=ChatTemplate(llm.model.chat_template()), tokenize=llm.tokenize, run=llm.run)
