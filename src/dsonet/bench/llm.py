"""`dso bench llm`: the embedded LLM's throughput, one sequence at a time against k decoded together.

The workload is the demo's: held-out drift prompts (a setup, a one-line task, the answer format),
greedy, ``max_tokens`` 48, exactly as `evaluate.answer` sends them. For each batch size k the same
prompts go through `LlamaCppLLM.generate` on a model loaded with ``slots=k`` (k = 1 is the
one-at-a-time path), through `dso llm serve` with k slots asked by k clients at once over HTTP,
and, beside them in the same run, through cyllama's own batched generator
(`cyllama.batching.BatchGenerator`: llama.cpp's multi-sequence decode as a prebuilt wheel ships it,
built for AVX2, where ours is compiled at install for this CPU; all k prompts prefilled in one
batch, then one token of each per step) on the same threads. Each
figure is the median of ``--runs`` passes, from a fresh model each pass (no prefix cache carried
over). Also reported: how many greedy answers at each k are identical to the k = 1 answers (the
batched kernels round differently, and a near-tie can tip), and the machine's load average.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import httpx

from dsonet.bench.proxy import Served
from dsonet.learn import drift
from dsonet.learn.chat import user
from dsonet.learn.llama_llm import DEFAULT_MODEL, MODELS, LlamaCppLLM, default_threads, gguf_path

RESULTS = Path("bench/results")
BATCHES = (1, 2, 4, 8, 16)
MAX_TOKENS = 48  # the demo's answer_tokens


def workload(n: int) -> list[list[dict]]:
    """n held-out drift prompts as the demo asks them (every fact in turn, distinct instances)."""
    per_fact = -(-n // len(drift.FACTS))
    (pool,) = drift.drift_splits([per_fact], seed=0)  # fact by fact: taken round-robin, so n < all still mixes facts
    tasks = [pool[f * per_fact + j] for j in range(per_fact) for f in range(len(drift.FACTS))][:n]
    return [user(f"{t.question}\n{drift.INSTRUCTION}") for t in tasks]


def ours(path: Path, chats: list, k: int, threads: int) -> dict:
    llm = LlamaCppLLM(path, threads=threads, slots=k)
    start = time.perf_counter()
    out = llm.generate(chats, n=1, temperature=0.0, max_tokens=MAX_TOKENS, seed=0)
    wall = time.perf_counter() - start
    return {"wall_s": wall, "prompt_tokens": sum(c.prompt_tokens for c in out),
            "generated_tokens": sum(c.completion_tokens for c in out), "texts": [c.texts[0] for c in out]}


def theirs(path: Path, chats: list, k: int, threads: int, prompts: list[str], sizes: list[int]) -> dict:
    """cyllama's BatchGenerator on the same prompts, k at a time (it takes at most n_seq_max a call)."""
    from cyllama.api import GenerationConfig
    from cyllama.batching import BatchGenerator

    longest = max(sizes) + MAX_TOKENS + 8
    gen = BatchGenerator(str(path), batch_size=max(512, longest * k), n_ctx=longest * k, n_seq_max=k)
    gen.ctx.set_n_threads(threads, threads)
    config = GenerationConfig(max_tokens=MAX_TOKENS, temperature=0.0, add_bos=True, parse_special=True)
    start = time.perf_counter()
    generated = 0
    for i in range(0, len(prompts), k):
        gen.ctx.kv_cache_clear()  # it leaves the last call's cells behind, and its positions restart at 0
        generated += sum(r.stats.generated_tokens for r in gen.generate_batch(prompts[i:i + k], config))
    wall = time.perf_counter() - start
    gen.close()
    return {"wall_s": wall, "prompt_tokens": sum(sizes), "generated_tokens": generated}


def served(path: Path, model: str, chats: list, k: int, threads: int) -> dict:
    """`dso llm serve` with k slots and k clients asking at once over HTTP, each sending its next prompt
    when its answer is back (the served model's parallel slots)."""
    from dsonet.serve.app import create_app
    from dsonet.serve.model import ServedModel

    llm = LlamaCppLLM(path, threads=threads, slots=k)
    with Served(create_app(ServedModel.of(llm, model))) as server, httpx.Client(timeout=600) as client:
        def ask(chat: list) -> dict:
            body = {"model": model, "messages": chat, "temperature": 0, "max_tokens": MAX_TOKENS}
            return client.post(f"{server.url}/v1/chat/completions", json=body).raise_for_status().json()["usage"]

        start = time.perf_counter()
        with ThreadPoolExecutor(k) as pool:
            usage = list(pool.map(ask, chats))
        wall = time.perf_counter() - start
    return {"wall_s": wall, "prompt_tokens": sum(u["prompt_tokens"] for u in usage),
            "generated_tokens": sum(u["completion_tokens"] for u in usage)}


def _rates(run: dict, n: int) -> dict:
    wall = run["wall_s"]
    return {"answers_per_s": n / wall, "prompt_tokens_per_s": run["prompt_tokens"] / wall,
            "generated_tokens_per_s": run["generated_tokens"] / wall, "wall_s": wall}


def _median(runs: list[dict]) -> dict:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def measure(model: str, n: int, runs: int, threads: int, batches=BATCHES, echo=click.echo) -> list[dict]:
    path, chats = gguf_path(model), workload(n)
    probe = LlamaCppLLM(path, threads=threads, slots=1)
    prompts = [probe.chat_prompt(c) for c in chats]
    sizes = [len(probe.tokenize(p)) for p in prompts]
    del probe
    rows, reference = [], None
    for k in batches:
        mine = [ours(path, chats, k, threads) for _ in range(runs)]
        if reference is None:
            reference = mine[0]["texts"]
        same = sum(a == b for a, b in zip(mine[0]["texts"], reference))
        other = [theirs(path, chats, k, threads, prompts, sizes) for _ in range(runs)]
        http = [served(path, model, chats, k, threads) for _ in range(runs)]
        row = {"model": model, "batch": k, "n_prompts": n, "threads": threads,
               "dsonet": _median([_rates(r, n) for r in mine]), "llama_cpp_batched": _median([_rates(r, n) for r in other]),
               "served": _median([_rates(r, n) for r in http]),
               "identical_to_sequential": same, "load_average_1min": round(os.getloadavg()[0], 2)}
        rows.append(row)
        echo(f"  {model} k={k:2d}: dsonet {row['dsonet']['answers_per_s']:.2f} answers/s, served {k} clients "
             f"{row['served']['answers_per_s']:.2f}, llama.cpp batched {row['llama_cpp_batched']['answers_per_s']:.2f}, "
             f"identical {same}/{n}, load {row['load_average_1min']}")
    return rows


def verdict(rows: list[dict]) -> dict:
    """The issue's bound for one model: 3x one sequence, or within 20% of llama.cpp's own best if that is lower."""
    one = next(r for r in rows if r["batch"] == 1)["dsonet"]["answers_per_s"]
    best = max(rows, key=lambda r: r["dsonet"]["answers_per_s"])
    theirs_best = max(r["llama_cpp_batched"]["answers_per_s"] for r in rows)
    bound = "3x one sequence" if 3 * one <= theirs_best else "within 20% of llama.cpp's batched figure"
    target = min(3 * one, 0.8 * theirs_best)
    return {"model": rows[0]["model"], "one_sequence": one, "best": best["dsonet"]["answers_per_s"],
            "best_batch": best["batch"], "speedup": round(best["dsonet"]["answers_per_s"] / one, 2),
            "llama_cpp_best": theirs_best, "bound": bound, "target": round(target, 3),
            "met": best["dsonet"]["answers_per_s"] >= target,
            "identical_at_best": f"{best['identical_to_sequential']}/{best['n_prompts']}"}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ks = [r["batch"] for r in mine]
        ax.plot(ks, [r["dsonet"]["answers_per_s"] for r in mine], "o-", label=f"dsonet, {model}")
        ax.plot(ks, [r["served"]["answers_per_s"] for r in mine], "^:", label=f"dso llm serve, k clients, {model}")
        ax.plot(ks, [r["llama_cpp_batched"]["answers_per_s"] for r in mine], "s--", label=f"llama.cpp batched, {model}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequences decoded together")
    ax.set_ylabel("answers / s (median)")
    ax.set_title("Embedded LLM on the demo's prompts")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@click.command()
@click.option("--model", "models", multiple=True, type=click.Choice(sorted(MODELS)),
              help="Embedded model(s) to measure; default: both.")
@click.option("--prompts", default=32, show_default=True, help="Demo-shaped prompts per pass.")
@click.option("--runs", default=3, show_default=True, help="Passes per set-up (the median is reported).")
@click.option("--threads", type=int, default=None, help="llama.cpp threads (default: half the cores, DSONET_LLM_THREADS).")
@click.option("--quick", is_flag=True, help=f"{DEFAULT_MODEL} only, 16 prompts, 1 pass, k = 1, 4, 8 (writes llm-quick.json).")
def cli(models: tuple[str, ...], prompts: int, runs: int, threads: int | None, quick: bool) -> None:
    """Answers/s, prompt and generated tokens/s of the embedded LLM at 1, 2, 4, 8 and 16 sequences
    decoded together, beside llama.cpp's own batched generator; writes bench/results/llm.json and llm.png.

    \b
    Example:
      dso bench llm --quick
    """
    threads = threads or default_threads()
    models = (DEFAULT_MODEL,) if quick else (models or tuple(sorted(MODELS, reverse=True)))
    batches = (1, 4, 8) if quick else BATCHES
    prompts, runs = (16, 1) if quick else (prompts, runs)
    rows = []
    for model in models:
        rows += measure(model, prompts, runs, threads, batches)
    verdicts = [verdict([r for r in rows if r["model"] == m]) for m in models]
    click.echo(f"\n{'model':20} {'k':>3} {'ours ans/s':>10} {'served':>7} {'llama.cpp':>10} {'gen tok/s':>9} "
               f"{'prompt tok/s':>12} {'same':>6} {'load':>5}")
    for r in rows:
        click.echo(f"{r['model']:20} {r['batch']:>3} {r['dsonet']['answers_per_s']:>10.2f} "
                   f"{r['served']['answers_per_s']:>7.2f} {r['llama_cpp_batched']['answers_per_s']:>10.2f} "
                   f"{r['dsonet']['generated_tokens_per_s']:>9.1f} "
                   f"{r['dsonet']['prompt_tokens_per_s']:>12.1f} {r['identical_to_sequential']:>3}/{r['n_prompts']:<2} "
                   f"{r['load_average_1min']:>5}")
    for v in verdicts:
        click.echo(f"{v['model']}: best {v['best']:.2f} answers/s at k={v['best_batch']} ({v['speedup']}x one sequence); "
                   f"llama.cpp batched best {v['llama_cpp_best']:.2f}; bound: {v['bound']} (target {v['target']:.2f}): "
                   f"{'met' if v['met'] else 'not met'}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("llm-quick.json" if quick else "llm.json")
    out.write_text(json.dumps({"rows": rows, "verdicts": verdicts, "max_tokens": MAX_TOKENS,
                               "cores": os.cpu_count()}, indent=1) + "\n")
    plot(rows, out.with_suffix(".png"))
    click.echo(f"wrote {out} and {out.with_suffix('.png')}")
