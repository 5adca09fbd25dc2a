"""`dso bench learn`: accuracy before and after training-free GRPO, per LLM.

For each LLM (the embedded SmolLM2-135M-Instruct, plus any OpenAI-compatible endpoint given
with --llm URL --model NAME): draw a reasoning-gym task set, split it into training and
held-out queries, measure held-out accuracy without experiences (greedy, one sample per
task), learn into a fresh SQLite library, then measure again with the retrieved experiences
injected — the same tasks and seeds, only the prompt differs. Reported: both accuracies, the
95% interval of their difference (paired bootstrap over tasks), experiences in the library,
tokens spent on learning and evaluation, wall time, and how many held-out prompts actually
received experiences.

The paper's reference (Training-free GRPO): AIME24 80.0 → 82.7 with DeepSeek-V3.1, about $18
of API calls. A 135M model is far below that regime; the row says what it does, improved or not.
Retrieval threshold: the experience-ledger rule is cosine > 0.6, but with MiniLM a lesson
("When subtracting, line up digits ...") scores about 0.2-0.45 against a bare arithmetic
question, so at 0.6 no held-out prompt receives anything and "with" equals "without" by
construction. The bench uses 0.3 and records the threshold and how many prompts got
experiences ("injected"); `dso eval --min-similarity` measures any other value.

The alternative a user would pick instead is the same model with no experiences, which is
the "without" column of the same run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from dsonet.bench.report import format_table, write_results

PAPER = {"task": "AIME24", "llm": "DeepSeek-V3.1", "accuracy_without": 0.800, "accuracy_with": 0.827,
         "cost_usd": 18}

# Settings sized for 2 shared CPU cores (SmolLM2: ~35 tokens/s unbatched).
FULL = {"size": 32, "held_out": 0.5, "epochs": 2, "batch_size": 8, "group_size": 5, "max_tokens": 48}
QUICK = {"size": 20, "held_out": 0.5, "epochs": 1, "batch_size": 5, "group_size": 4, "max_tokens": 48}
TASK_CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # SmolLM2 solves some


def run_one(llm, task: str, settings: dict, min_similarity: float, seed: int = 0) -> dict:
    from dsonet.encoders import default_encoder
    from dsonet.learn.context import Retrieval, with_experiences
    from dsonet.learn.evaluate import accuracy, evaluate
    from dsonet.learn.grpo import LearnConfig, Learner
    from dsonet.learn.tasks import load_tasks
    from dsonet.library import Library

    train, test = load_tasks(task, size=settings["size"], seed=seed, **TASK_CONFIG).split(settings["held_out"], seed)
    retrieval = Retrieval(min_similarity=min_similarity)
    t0 = time.perf_counter()
    baseline, base_tokens = accuracy(llm, test, None, max_tokens=settings["max_tokens"], seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        lib = Library(Path(tmp) / "lib.db", encoder=default_encoder())
        config = LearnConfig(group_size=settings["group_size"], max_tokens=settings["max_tokens"],
                             epochs=settings["epochs"], batch_size=settings["batch_size"], retrieval=retrieval,
                             seed=seed)
        stats = Learner(llm, lib, config, Path(tmp) / "run").run(train, progress=True)
        result = evaluate(llm, test, lib, max_tokens=settings["max_tokens"], seed=seed, retrieval=retrieval,
                          baseline=baseline)
        injected = sum(bool(with_experiences(lib, t.question, t.question, retrieval)[1]) for t in test.tasks)
        experiences = [e.text for e in lib.all()]
        lib.close()
        skipped = _skipped_examples(Path(tmp) / "run" / "log.jsonl")
    d = result.to_dict()
    return {"llm": llm.name, "task": task, "n_eval": d["n_eval"], "accuracy_without": d["accuracy_without"],
            "accuracy_with": d["accuracy_with"], "ci95": d["ci95"], "experiences": len(experiences),
            "tokens": stats.tokens + base_tokens + result.tokens, "wall_s": round(time.perf_counter() - t0, 1),
            "n_train": len(train.tasks), "train_mean_reward": round(stats.mean_reward, 4),
            "mixed_groups": stats.mixed_groups, "groups": stats.groups, "proposals": stats.proposals,
            "skipped_outputs": stats.skipped, "operations": stats.operations, "injected": injected,
            "min_similarity": min_similarity, "wilson_without": d["wilson_without"], "wilson_with": d["wilson_with"],
            "learned": experiences, "skipped_examples": skipped, "settings": settings}


def _skipped_examples(log: Path, keep: int = 3) -> list[dict]:
    """A few malformed LLM outputs from the run log, so the JSON shows what was skipped and why."""
    import json

    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [{"stage": r["stage"], "reason": r["reason"], "raw": r["raw"][:300]}
            for r in rows if r["type"] == "skipped"][:keep]


@click.command()
@click.option("--quick", is_flag=True, help="A smaller run: about 1–2 minutes for SmolLM2 on an idle 2-core machine.")
@click.option("--task", default="rg:chain_sum", show_default=True, help="Task set (see `dso learn --help`).")
@click.option("--llm", "url", default=None, metavar="URL", help="Also run an OpenAI-compatible endpoint.")
@click.option("--model", default=None, help="Served model name for --llm.")
@click.option("--no-local", is_flag=True, help="Skip the embedded SmolLM2 row (with --llm).")
@click.option("--min-similarity", default=0.3, show_default=True,
              help="Retrieval threshold. The paper's 0.6 injects nothing here (see the module docstring).")
def cli(quick: bool, task: str, url: str | None, model: str | None, no_local: bool, min_similarity: float) -> None:
    """Accuracy before and after learning experiences, per LLM: the embedded SmolLM2 and,
    with --llm URL --model NAME, any OpenAI-compatible server. Writes bench/results/learn.json (learn-quick.json with --quick).

    \b
    Examples:
      dso bench learn --quick
      dso bench learn --llm http://localhost:8000/v1 --model Qwen/Qwen3-8B
    """
    from dsonet.learn.llm import open_llm

    settings = QUICK if quick else FULL
    llms = ([] if no_local else [open_llm()]) + ([open_llm(url, model)] if url else [])
    if not llms:
        raise click.UsageError("--no-local leaves nothing to run; add --llm URL --model NAME")
    rows = [run_one(llm, task, settings, min_similarity) for llm in llms]
    click.echo(format_table(rows + [{"llm": f"paper: {PAPER['llm']}", "task": PAPER["task"],
                                     "accuracy_without": PAPER["accuracy_without"],
                                     "accuracy_with": PAPER["accuracy_with"]}],
                            ["llm", "task", "n_eval", "accuracy_without", "accuracy_with", "ci95", "experiences",
                             "injected", "tokens", "wall_s"]))
    for row in rows:
        for text in row["learned"]:
            click.echo(f"  learned ({row['llm']}): {text}")
    path = write_results("learn", {"rows": rows, "paper": PAPER, "quick": quick, "task_config": TASK_CONFIG}, quick=quick)
    click.echo(f"wrote {path}")
