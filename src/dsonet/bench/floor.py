"""`dso bench floor`: the least time one cold drift seed can take on this machine, however its LLM work is scheduled.

A drift seed (`dso bench learn --family drift`) spends nearly all its time in the embedded models. The
floor counts the work the seed cannot skip and prices it at the best rates llama.cpp reaches here:

1. the seed is replayed from its answer cache (`CachedLLM`): every chat each model is asked is recorded and
   answered from disk, while the rest of the run (the sandbox, the nodes, the encoder) runs for real. The
   replay's wall time is the part no LLM speed-up removes. A chat the cache lacks stops the replay: the floor
   is of a seed that ran cold once (about an hour on 2 cores).
2. per model, the tokens of the distinct prompts, and the fewest of them a prefix cache could ever prefill:
   the distinct prefixes among them (`distinct_prefix_tokens`); and the tokens their answers generated.
3. per model, on a fresh context with this run's threads (`rates`): prefill tokens/s of the seed's prompts
   one at a time (the best of three passes), and, for comparison, decode tokens/s with ``k`` sequences
   decoded together.

floor = (distinct prefixes + generated tokens) / prefill rate, summed over the models, plus the replay. A
decode step of k sequences is a batch of k tokens through the same weights, so no generated token comes
cheaper than a prefilled one (the decode rate at k = 64 shows how far below it decoding stays). The floor
is below any real run's: it shares every prefix, decodes at prefill speed, and ignores that the learner's
steps wait on each other (rollouts, then the reflection, then the gate).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import click

from dsonet.bench import drift
from dsonet.bench.report import format_table, write_results
from dsonet.learn.cache import CachedLLM
from dsonet.learn.chat import Chat, Completion, LLMError
from dsonet.learn.llama_llm import MODELS, LlamaCppLLM, default_threads, gguf_path
from dsonet.learn.llm import open_llm
from dsonet.sim.scenario import OTHER, REFLECTOR

TARGET_S = 30 * 60  # issue 37: one drift seed of the 0.5B within 30 minutes on 2 cores


class NotReplayed(LLMError):
    """The answer cache lacks a chat the replay asked for: that seed has not run cold here."""


class Recording:
    """A cached model that answers only from its cache and records every distinct chat it is asked."""

    def __init__(self, llm: CachedLLM):
        self.llm = llm
        self.asked: dict[str, tuple[Chat, Completion]] = {}

    def __getattr__(self, attr):  # name, count_tokens, chat_prompt ... of the cached model
        return getattr(self.llm, attr)

    def generate(self, chats: Sequence[Chat], n: int = 1, temperature: float = 0.7, max_tokens: int = 128,
                 seed: int | None = None) -> list[Completion]:
        out = self.llm.cached(chats, n, temperature, max_tokens, seed)
        missing = sum(c is None for c in out)
        if missing:
            raise NotReplayed(f"{self.llm.name}: {missing} of {len(chats)} answers are not in {self.llm.path}; "
                              "run the seed once first (`dso bench learn --family drift --seeds S`), with the same "
                              "DSONET_CACHE")
        for chat, c in zip(chats, out):
            self.asked[json.dumps([chat, n, temperature, max_tokens, seed], sort_keys=True)] = (chat, c)
        return out  # type: ignore[return-value]


def distinct_prefix_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens a prefix cache must prefill at least to hold every prompt: the nodes of their prefix trie.
    Sorted, each distinct prompt adds its tokens beyond its longest common prefix with the one before."""
    total, before = 0, ()
    for p in sorted(set(map(tuple, prompts))):
        shared = next((i for i, (a, b) in enumerate(zip(p, before)) if a != b), min(len(p), len(before)))
        total += len(p) - shared
        before = p
    return total


def rates(key: str, prompts: Sequence[Sequence[int]], threads: int, k: int = 64, steps: int = 16, passes: int = 3
          ) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s at ``k`` sequences together) of ``key`` on a fresh context, from k of
    ``prompts`` spread over them. Prefill: each of the first 16 alone, the best of ``passes`` passes (a floor
    wants the fastest this machine gives). Decode: all k held, then the median of ``steps`` steps of all k."""
    from dsonet.learn.llama_api import Batch

    llm = LlamaCppLLM(gguf_path(key), threads=threads, slots=k, n_ctx=1024)  # k streams of 4096 cells: 7 GB
    fit = [p for p in prompts if len(p) <= llm.n_batch]
    sample = fit[::max(1, len(fit) // k)][:k]
    if len(sample) < k:
        raise LLMError(f"{key}: {len(sample)} prompts fit a batch of {llm.n_batch} tokens; the decode rate needs {k}")
    batch = Batch(llm.n_batch, k)

    def prefill(seq: int, p: Sequence[int]) -> float:
        llm.ctx.forget(seq)
        batch.clear()
        for pos, tok in enumerate(p):
            batch.add(tok, pos, seq, pos == len(p) - 1)
        start = time.perf_counter()
        llm.ctx.decode(batch)
        return time.perf_counter() - start

    first = sample[:16]
    best = min(sum(prefill(seq, p) for seq, p in enumerate(first)) for _ in range(passes))
    for seq, p in enumerate(sample):
        prefill(seq, p)
    per_step = []
    for step in range(steps):  # every stream holds its prompt: one more token of each, all k in one decode
        batch.clear()
        for seq, p in enumerate(sample):
            batch.add(p[step % len(p)], len(p) + step, seq, True)
        start = time.perf_counter()
        llm.ctx.decode(batch)
        per_step.append(time.perf_counter() - start)
    return sum(map(len, first)) / best, k / statistics.median(per_step)


@dataclass(frozen=True)
class Work:
    """One model's part of the seed, and what it costs at best on this machine."""

    model: str
    prompts: int  # distinct requests (a chat with n samples is one prompt)
    prompt_tokens: int
    distinct_prefix_tokens: int
    generated_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float  # at `batch` sequences together
    batch: int

    @property
    def floor_s(self) -> float:
        return (self.distinct_prefix_tokens + self.generated_tokens) / self.prefill_tokens_per_s


def replay(model: str, seed: int, reflector: str | None) -> tuple[dict[str, list[tuple[Chat, Completion]]], float]:
    """Every distinct chat each model was asked in the cached seed, by model name, and the replay's wall time."""
    agent, other, teacher = map(Recording, drift.cached_models(model, reflector))
    with tempfile.TemporaryDirectory(prefix="dso-floor-") as root:
        start = time.perf_counter()
        asyncio.run(drift.run_seed(agent, other, teacher, drift.FULL, seed, Path(root), log=lambda _: None))
        wall = time.perf_counter() - start
    asked: dict[str, dict[str, tuple[Chat, Completion]]] = {}
    for r in (agent, other, teacher):
        asked.setdefault(r.name, {}).update(r.asked)
    return {name: list(chats.values()) for name, chats in asked.items()}, wall


def work(key: str, asked: list[tuple[Chat, Completion]], threads: int, batch: int) -> Work:
    llm = open_llm(None, key)
    prompts = [llm.tokenize(llm.chat_prompt(chat)) for chat, _ in asked]
    prefill, decode = rates(key, prompts, threads, batch)
    return Work(MODELS[key].name, len(prompts), sum(map(len, prompts)), distinct_prefix_tokens(prompts),
                sum(c.completion_tokens for _, c in asked), round(prefill, 1), round(decode, 1), batch)


@click.command()
@click.option("--model", default="qwen2.5-coder-0.5b", show_default=True, type=click.Choice(sorted(OTHER)),
              help="The seed's evaluated agent (the other embedded model is the fleet's other agent).")
@click.option("--seed", default=0, show_default=True,
              help="The learning seed, already run cold with this DSONET_CACHE.")
@click.option("--reflector", default=None, help=f"The seed's reflector (default {REFLECTOR}).")
@click.option("--batch", default=64, show_default=True,
              help="Sequences decoded together for the decode rate shown beside the floor.")
@click.option("--measured", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The seed's result file (bench/results/...-seed<S>.json): its wall time goes beside the floor.")
def cli(model: str, seed: int, reflector: str | None, batch: int, measured: Path | None) -> None:
    """The least time one cold drift seed can take on this machine: its distinct prompt prefixes and its
    generated tokens, all at llama.cpp's prefill rate, and the rest of the run replayed from the answer
    cache. Writes bench/results/floor.json.

    \b
    Example (after `dso bench learn --family drift --seeds 0` has run once):
      dso bench floor --seed 0 --measured bench/results/learn-drift-qwen2.5-coder-0.5b-seed0.json
    """
    threads = default_threads()
    click.echo(f"replaying drift seed {seed} of {model} from the answer cache ...")
    try:
        asked, other_s = replay(model, seed, reflector)
    except NotReplayed as exc:
        raise click.ClickException(str(exc)) from exc
    keys = {spec.name: key for key, spec in MODELS.items()}
    parts = []
    for name, chats in asked.items():
        click.echo(f"measuring {name} on {threads} threads ...")
        parts.append(work(keys[name], chats, threads, batch))
    floor_s = sum(p.floor_s for p in parts) + other_s
    measured_s = json.loads(measured.read_text())["facts"]["wall_s"] if measured else None
    rows = [asdict(p) | {"floor_min": round(p.floor_s / 60, 1)} for p in parts]
    rows.append({"model": "the rest of the run (replayed)", "floor_min": round(other_s / 60, 1)})
    rows.append({"model": "one seed, at least", "floor_min": round(floor_s / 60, 1)})
    click.echo(format_table(rows, ["model", "prompts", "prompt_tokens", "distinct_prefix_tokens", "generated_tokens",
                                   "prefill_tokens_per_s", "decode_tokens_per_s", "floor_min"]))
    click.echo(f"floor {floor_s / 60:.1f} min" + (f", measured cold {measured_s / 60:.1f} min" if measured_s else "")
               + f", target {TARGET_S / 60:.0f} min ({threads} threads, {os.cpu_count()} cores)")
    path = write_results("floor", {"model": model, "seed": seed, "threads": threads, "cores": os.cpu_count(),
                                   "parts": rows, "other_s": round(other_s, 1), "floor_s": round(floor_s, 1),
                                   "measured_s": measured_s, "target_s": TARGET_S,
                                   "measured_from": str(measured) if measured else None})
    click.echo(f"wrote {path}")
