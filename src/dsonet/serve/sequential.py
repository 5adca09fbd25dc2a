"""One sequence at a time over `LlamaCppLLM`'s context: the stand-in for its batched ``run``.

The same shapes as the batched path (`Request` in, `Generated` out, pieces through ``on_text``),
so `dsonet.serve.slots` calls either one the same way; this one decodes the requests one after
the other on the model's single sequence, keeping its prefix cache (`LlamaCppLLM._prefill`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from dsonet.learn.llama_llm import LlamaCppLLM


@dataclass
class Request:
    """One sequence to generate."""

    tokens: list[int]  # the prompt, tokenized
    temperature: float = 0.0
    max_tokens: int = 128
    seed: int = 0
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF, root rule "root"
    on_text: Callable[[str], None] | None = None  # the answer's pieces, in order, as they are decoded


@dataclass
class Generated:
    text: str
    tokens: int
    finish: str  # "stop" (end of turn or a stop string) | "length" (max_tokens)


def run(llm: LlamaCppLLM, requests: Sequence[Request]) -> list[Generated]:
    """Each request in turn, under the model's lock (its context is not thread-safe)."""
    with llm._lock:
        return [_one(llm, r) for r in requests]


def _sampler(llm: LlamaCppLLM, r: Request):
    L = llm._L
    sampler = L.LlamaSampler(L.LlamaSamplerChainParams())
    if r.grammar:  # first in the chain: the choices it forbids never reach the draw
        sampler.add_grammar(llm.vocab, r.grammar, "root")
    if r.temperature == 0:
        sampler.add_greedy()
    else:
        sampler.add_temp(r.temperature)
        sampler.add_dist(r.seed & 0xFFFFFFFF)
    return sampler


def _one(llm: LlamaCppLLM, r: Request) -> Generated:
    llm._prefill(r.tokens)
    sampler = _sampler(llm, r)
    out: list[int] = []
    text, sent, finish = "", 0, "length"
    hold = max((len(s) for s in r.stop), default=1) - 1  # characters that may be the start of a stop string
    for _ in range(r.max_tokens):
        token = sampler.sample(llm.ctx, -1)
        if llm.vocab.is_eog(token):
            finish = "stop"
            break
        out.append(token)
        text = llm._detok(out)
        cut = min((text.find(s) for s in r.stop if s in text), default=-1)
        if cut >= 0:
            text, finish = text[:cut], "stop"
            break
        if r.on_text and not text.endswith("\ufffd") and len(text) - hold > sent:  # not half a character
            r.on_text(text[sent:len(text) - hold])
            sent = len(text) - hold
        llm.ctx.decode(llm._L.llama_batch_get_one([token], len(llm._cached)))
        llm._cached.append(token)
    if r.on_text and len(text) > sent:
        r.on_text(text[sent:])
    return Generated(text, len(out), finish)
