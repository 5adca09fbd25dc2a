"""`dso demo`: the main job (what `make demo` runs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click


@click.command()
@click.option("--nodes", default=8, show_default=True, help="Fleet size, Byzantine nodes included.")
@click.option("--byzantine", default=2, show_default=True, help="How many nodes attack.")
@click.option("--task", default="letter_counting", show_default=True,
              help="Task set: a `dso bench learn` family (letter_counting, lcm, fraction_simplification...), "
                   "rg:<reasoning-gym generator>, gsm8k or jsonl:<path>.")
@click.option("--train-per-node", default=2, show_default=True, help="Training tasks per honest node.")
@click.option("--eval-tasks", default=60, show_default=True, help="Held-out tasks answered with and without experiences.")
@click.option("--rollouts", default=4, show_default=True, help="Rollouts per query (G).")
@click.option("--max-tokens", default=48, show_default=True, help="Tokens per rollout and per answer.")
@click.option("--validation-tasks", default=12, show_default=True,
              help="Training tasks held apart: a new lesson is kept only if accuracy on them with it is not lower "
                   "than without nor than with neutral text of its length, and the retrieval threshold is "
                   "measured on their questions (0: no gate).")
@click.option("--min-similarity", type=click.FloatRange(-1, 1), default=None,
              help="Retrieval threshold [default: measured on the validation questions: the protocol's 0.6 when "
                   "half of them have a lesson above it, else their 20th percentile].")
@click.option("--llm", "llm_url", default=None, help="OpenAI-compatible server URL (vLLM, Ollama, llama.cpp; env "
              "OPENAI_BASE_URL); default: the embedded model on llama.cpp.")
@click.option("--model", "llm_model", default=None, help="Served model name (with --llm URL); locally an embedded "
              "model (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, smollm2), a .gguf file or a HF folder.")
@click.option("--nats", is_flag=True, help="Run the nodes as separate processes over a local three-server NATS "
              "JetStream cluster that the command starts and stops (needs nats-server on PATH).")
@click.option("--seed", default=0, show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the nodes keep their keys and libraries, new or empty (default: a temporary directory).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench/results/demo.json"),
              show_default=True, help="Where to write the report as JSON.")
def demo(json_out: Path, **options) -> None:
    """Run a whole DSO fleet on the embedded defaults and report what happened.

    Honest nodes learn lessons with the LLM on their own tasks, encode, compress (BitDelta),
    sign and publish them; the Byzantine nodes publish hijacks, random codes, forged, tampered
    and replayed batches, then plausible but wrong lessons (poison); every honest node runs
    DeltaSoup. Held-out tasks are answered without lessons, with each node's own, with the
    fleet's and with the poisoned fleet's, each with a 95% interval. By default the nodes run
    in this process on one shared log; with --nats they are `dso node start` processes on a
    local NATS JetStream cluster and the agents reach them through their HTTP APIs.

    \b
    Examples:
      dso demo
      dso demo --nats                          # the same fleet as processes over NATS
      dso demo --task gsm8k --eval-tasks 40
      dso demo --llm http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    """
    from dsonet.demo import DemoConfig, format_report, run_demo

    report = asyncio.run(run_demo(DemoConfig(**options), echo=click.echo))
    click.echo(format_report(report))
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    click.echo(f"wrote {json_out}")
