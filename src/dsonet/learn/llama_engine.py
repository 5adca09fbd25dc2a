"""Batched decoding on one llama.cpp context: independent sequences generated together, a slot each.

On a CPU a decode step of one sequence reads every weight of the model to produce one token; a
step over k sequences reads them once for k tokens. So the engine keeps up to ``slots``
sequences in flight: each step decodes one token of every active sequence in a single
``llama_decode`` call, and a finished sequence's slot takes the next waiting request at once
(continuous batching), so a long answer never holds the others back.

Each slot has its own KV stream of ``n_ctx`` cells (llama.cpp's non-unified cache): a sequence's
cells sit where they would if it ran alone, so its attention sums in the same order and greedy
answers match the one-at-a-time path but for the weights' batched kernels. A slot keeps its tokens
after its answer is done (its prefix cache), and a new prompt starts from the longest prefix a slot
holds: its own, or another's copied over (``memory_seq_cp``, a memory copy, no compute) when that
saves at least ``MIN_COPY`` tokens; only the rest is prefilled. The n samples of one prompt therefore
prefill it once, and prompts that share a system message share its prefill.

A sample is reproducible from its own seed whatever else runs beside it: each sequence has its own
sampler chain, fed the logits of its own row of the batch. Greedy answers equal the one-at-a-time
answers up to the batched kernels' rounding (``dso bench llm`` measures how often they differ).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from dsonet.learn.chat import LLMError

if TYPE_CHECKING:
    from dsonet.learn.llama_api import Context, Vocab


@dataclass
class Request:
    """One sequence to generate from an already tokenized prompt."""

    tokens: list[int]
    temperature: float = 0.0
    max_tokens: int = 128
    seed: int = 0
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF whose rule "root" the answer must match
    on_text: Callable[[str], None] | None = None  # streamed pieces of the answer, in order; joined = .text
    on_done: Callable[["Generated"], None] | None = None  # the result, as soon as this sequence finishes
    cancelled: Callable[[], bool] | None = None  # asked every step: True stops it (its caller went away)


@dataclass(frozen=True)
class Generated:
    text: str  # cut before the first stop string, trailing space removed
    tokens: int  # tokens generated (the stop string's included, the end-of-generation token not)
    finish: str  # "stop" (end of generation or a stop string) | "length" (max_tokens) | "cancelled"


@dataclass
class _Slot:
    cached: list[int] = field(default_factory=list)  # the tokens whose cells this sequence holds, in order
    request: Request | None = None
    index: int = -1  # the request's place in the call's list
    sampler: object = None
    out: list[int] = field(default_factory=list)
    sent: int = 0  # characters of the answer already handed to on_text
    used: int = 0  # the step at which it last served a request (least recently used is evicted first)

    @property
    def active(self) -> bool:
        return self.request is not None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


STOP_TAIL = 16  # tokens at the answer's end searched for a stop string after each new one
MIN_COPY = 32  # prompt tokens a copied prefix must save: a copy moves the source's whole KV stream


class SlotEngine:
    """Runs `Request`s on a llama.cpp context created with ``n_seq_max = slots``, a KV stream each."""

    def __init__(self, ctx: Context, vocab: Vocab, slots: int, n_ctx: int, n_batch: int):
        # llama.cpp itself loads with the first engine: `Request` and `Generated` alone (the answer cache's,
        # the server's) must not pull it in
        from dsonet.learn.llama_api import Batch, Sampler

        self.ctx, self.vocab, self._sampler = ctx, vocab, Sampler
        self.slots = [_Slot() for _ in range(slots)]
        self.n_ctx, self.n_batch = n_ctx, n_batch
        self._step = 0
        self._batch = Batch(max(n_batch, slots), slots)

    # -- one call ------------------------------------------------------------------------
    def run(self, requests: Sequence[Request], intake: Callable[[], Sequence[Request]] | None = None
            ) -> list[Generated]:
        """Generate every request, up to ``len(self.slots)`` at a time; results in the requests' order.
        ``intake``: asked between decode steps for requests that arrived meanwhile (a server's), which
        join the running ones at once; the call returns when nothing runs and nothing waits."""
        requests = list(requests)
        for r in requests:
            self._check(r)
        done: list[Generated | None] = [None] * len(requests)
        waiting = deque(range(len(requests)))
        while True:
            for r in intake() if intake is not None else ():
                self._check(r)
                requests.append(r)
                done.append(None)
                waiting.append(len(requests) - 1)
            while waiting and self._admit(requests, waiting[0], done):
                waiting.popleft()
            if not any(s.active for s in self.slots):
                if waiting:
                    continue  # each admitted request finished on its first token: the slots are free again
                return done  # type: ignore[return-value]
            self._decode_step(done)

    def _check(self, r: Request) -> None:
        if len(r.tokens) + r.max_tokens > self.n_ctx:
            raise LLMError(f"prompt: {len(r.tokens)} tokens + max_tokens {r.max_tokens} exceed the context of "
                           f"{self.n_ctx}; shorten the prompt or lower max_tokens")

    # -- admission: place a request in a slot, prefilled from the best cached prefix --------
    def _admit(self, requests: Sequence[Request], i: int, done: list) -> bool:
        req = requests[i]
        free = [s for s in self.slots if not s.active]
        if not free:
            return False
        want = req.tokens[:-1]  # the prompt's last token is always decoded: its logits are this request's own
        target = max(free, key=lambda s: (common_prefix(s.cached, want), -s.used))
        source = max(self.slots, key=lambda s: common_prefix(s.cached, want))
        tid, keep = self.slots.index(target), common_prefix(target.cached, want)
        if common_prefix(source.cached, want) >= keep + MIN_COPY:
            # across streams llama.cpp copies whole sequences only: take the source's, then cut it back
            keep = common_prefix(source.cached, want)
            self.ctx.forget(tid)
            self.ctx.copy(self.slots.index(source), tid)
        self.ctx.forget(tid, keep)
        target.cached = req.tokens[:keep]
        self._prefill(tid, target, req.tokens[keep:])
        target.request, target.index, target.out, target.sent, target.used = req, i, [], 0, self._step
        target.sampler = self._sampler(self.vocab, req.temperature, req.seed, req.grammar)
        self._accept(target, target.sampler.sample(self.ctx, -1), done)
        return True

    def _prefill(self, sid: int, slot: _Slot, tokens: list[int]) -> None:
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            self._batch.clear()
            for j, tok in enumerate(chunk):
                self._batch.add(tok, len(slot.cached) + j, sid, start + j == len(tokens) - 1)
            self.ctx.decode(self._batch)
            slot.cached += chunk

    # -- generation: one token of every active sequence per decode --------------------------
    def _decode_step(self, done: list) -> None:
        for s in self.slots:
            if s.active and s.request.cancelled is not None and s.request.cancelled():
                self._finish(s, "cancelled", done)
        active = [(sid, s) for sid, s in enumerate(self.slots) if s.active]
        if not active:
            return
        self._batch.clear()
        for sid, s in active:
            self._batch.add(s.out[-1], len(s.cached), sid, True)
        self.ctx.decode(self._batch)
        self._step += 1
        for row, (sid, s) in enumerate(active):
            s.cached.append(s.out[-1])
            self._accept(s, s.sampler.sample(self.ctx, row), done)

    def _accept(self, slot: _Slot, token: int, done: list) -> None:
        """Take a sampled token: finish the sequence on end of generation, a stop string or its length."""
        req = slot.request
        if self.vocab.is_eog(token):
            return self._finish(slot, "stop", done)
        slot.out.append(token)
        # a stop string can only have just appeared at the end: the tail is enough (the whole answer,
        # detokenized every step, made a long answer's steps cost more and more)
        if req.stop and any(s in self._detok(slot.out[-STOP_TAIL:]) for s in req.stop):
            return self._finish(slot, "stop", done)
        if len(slot.out) >= req.max_tokens:
            return self._finish(slot, "length", done)
        if req.on_text:  # hold back what could still become a stop string
            text = self._detok(slot.out)
            # trailing space waits for what follows it: the answer is returned without it
            safe = min(len(text.rstrip()), len(text) - max((len(s) - 1 for s in req.stop), default=0))
            cut = text.find("\ufffd", slot.sent)  # a character whose bytes span tokens not yet all sampled
            safe = safe if cut < 0 else min(safe, cut)
            if safe > slot.sent:
                req.on_text(text[slot.sent:safe])
                slot.sent = safe

    def _finish(self, slot: _Slot, why: str, done: list) -> None:
        req = slot.request
        text = self._detok(slot.out)
        for s in req.stop:
            text = text.split(s)[0]
        text = text.rstrip()
        if req.on_text and len(text) > slot.sent:
            req.on_text(text[slot.sent:])
        done[slot.index] = Generated(text, len(slot.out), why)
        slot.request, slot.sampler = None, None
        if req.on_done is not None:
            req.on_done(done[slot.index])

    def _detok(self, tokens: list[int]) -> str:
        return self.vocab.detokenize(tokens, remove_special=True, unparse_special=False) if tokens else ""
