"""`dso bench ...`: every benchmark is one module in dsonet.bench with a click command `cli`."""

from __future__ import annotations

import click

from dsonet.cli.lazy import LazyGroup

BENCHMARKS = {
    "codec": ("dsonet.bench.codec:cli", "BitDelta fidelity, size and speed on real embeddings."),
    "learn": ("dsonet.bench.learn:cli", "Accuracy before/after training-free GRPO (the embedded Qwen2.5-Coder, any OpenAI server)."),
    "retrieval": ("dsonet.bench.retrieval:cli", "Search over compressed codes at d = 7680 beside faiss (10k-1M)."),
    "robustness": ("dsonet.bench.robustness:cli", "Retrieval accuracy under Byzantine nodes, per attack and rule."),
    "all": ("dsonet.bench.all:cli", "Run every benchmark and write bench/REPORT.md."),
    "network": ("dsonet.bench.network:cli", "Three nodes on NATS: API throughput, propagation, wire bytes."),
    "crossmodel": ("dsonet.bench.crossmodel:cli", "Cross-model retrieval: WordLlama + adapter vs native, Recall@5/@10, latency."),
    "proxy": ("dsonet.bench.proxy:cli", "Latency `dso proxy` adds to a chat completion (p50, p99)."),
    "train": ("dsonet.bench.train:cli", "A short Zen head training: each stage's metric before and after."),
    "relevance": ("dsonet.bench.relevance:cli", "Relevance: injection precision/recall/silence, each scoring, cold cost."),
    "coldstart": ("dsonet.bench.coldstart:cli", "Cold `dso search` at 10k rows (numpy vs torch encoder), import time, core install size."),
    "gate": ("dsonet.bench.gate_audit:cli", "The learner's execution gate on hand-checked drift lessons: how many wrong ones it keeps."),
    "floor": ("dsonet.bench.floor:cli", "The least time one cold drift seed can take here: its distinct prompt prefixes and generated tokens at llama.cpp's prefill rate."),
    "llm": ("dsonet.bench.llm:cli", "The embedded LLM: answers/s at 1-16 sequences decoded together, beside llama.cpp's batched generator."),
    "agents": ("dsonet.bench.agents:cli", "Coding agents learning on the job through `dso proxy --learn` on a NATS fleet, poisoned: first-try pass, tokens per solved task."),
    "page": ("dsonet.bench.page:cli", "The node's web page on a 100k-row library: ms per page, filters and deep pages (target 200 ms)."),
}


@click.group(cls=LazyGroup, lazy=BENCHMARKS)
def bench() -> None:
    """Benchmarks: each prints a table, writes bench/results/<name>.json and puts our figure
    beside the paper's and beside the library a user would pick instead.

    \b
    Example:
      dso bench codec --quick
    """
