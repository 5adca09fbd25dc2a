"""`dso demo`: the main job (what `make demo` runs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click


@click.command()
@click.option("--nodes", default=6, show_default=True, help="Fleet size, Byzantine nodes included.")
@click.option("--byzantine", default=2, show_default=True, help="How many nodes attack.")
@click.option("--facts", default=8, show_default=True,
              help="Drift change facts in play (and N // 3 controls), the libraries in turn, dealt out among the "
                   "honest nodes.")
@click.option("--train-per-fact", default=1, show_default=True, help="Training instances per fact.")
@click.option("--eval-per-fact", default=15, show_default=True,
              help="Held-out instances per change fact (without and fleet answer all; own, poisoned and after "
                   "feedback every other block).")
@click.option("--eval-per-control", default=2, show_default=True, help="Held-out instances per control fact.")
@click.option("--feedback-tasks", default=35, show_default=True,
              help="Practice tasks per honest node in the feedback phase, whose outcomes move the signers' reputation.")
@click.option("--practice-per-fact", default=5, show_default=True,
              help="Training instances per fact that no node learns from, kept for the feedback phase.")
@click.option("--rollouts", default=4, show_default=True, help="Attempts per training instance (G).")
@click.option("--candidates", default=1, show_default=True,
              help="Sampled lesson proposals per task; the execution gate keeps the best.")
@click.option("--gate-items", default=2, show_default=True,
              help="Validation instances nearest a lesson that it is judged on (plus one other).")
@click.option("--max-tokens", default=48, show_default=True, help="Tokens per attempt and per answer.")
@click.option("--reflector", default=None,
              help="Model that writes the lessons [default: qwen2.5-coder-1.5b embedded; with --llm, the agent].")
@click.option("--min-similarity", type=click.FloatRange(-1, 1), default=None,
              help="Retrieval threshold [default: the space's calibrated threshold].")
@click.option("--llm", "llm_url", default=None, help="OpenAI-compatible server URL (vLLM, Ollama, llama.cpp; env "
              "OPENAI_BASE_URL); default: the embedded model on llama.cpp.")
@click.option("--model", "llm_model", default=None, help="Served model name (with --llm URL); locally an embedded "
              "model (qwen2.5-coder-0.5b, the default; qwen2.5-coder-1.5b, smollm2), a .gguf file or a HF folder.")
@click.option("--nats", is_flag=True, help="Run the nodes as separate processes over a local three-server NATS "
              "JetStream cluster that the command starts and stops (needs nats-server on PATH).")
@click.option("--seed", default=0, show_default=True, help="Rotates which honest node gets which facts.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the nodes keep their keys and libraries, new or empty (default: a temporary directory).")
@click.option("--fresh-answers", is_flag=True, help="Generate every answer again instead of replaying the ones an "
              "earlier run kept in the answer cache (~/.cache/dsonet/demo/answers.sqlite).")
@click.option("--threads", type=click.IntRange(1, 64), default=None,
              help="llama.cpp threads of the embedded models [default: every core (at most 4) when the machine is "
                   "otherwise idle, else half; env DSONET_LLM_THREADS]. Threads that share a core with other work "
                   "busy-wait for each other and run several times slower.")
@click.option("--job/--no-job", default=True, show_default=True,
              help="The last act, on the embedded models: one agent's error, learned by its `dso proxy --learn` from "
                   "its traffic alone, becomes another agent's first-try pass (about a minute the first time; its "
                   "sequences are kept in the answer cache too, so a rerun replays it in seconds).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench/results/demo.json"),
              show_default=True, help="Where to write the report as JSON.")
def demo(json_out: Path, fresh_answers: bool, **options) -> None:
    """A fleet of coding agents learns the installed libraries together, and is attacked.

    The task (drift): one line of Python whose right answer depends on the releases installed in
    the sandbox (.venv-drift, drift.lock), checked by running it. Each honest node's agent practises
    on its own facts; a reflector writes lessons from what running the attempts showed; the nodes
    encode, compress (BitDelta), sign and publish them. The Byzantine nodes publish hijacks, random
    codes, forged, tampered and replayed batches, then a plausible wrong lesson for every fact
    (poison); the agents report each lesson's outcome, and a node stops using a signer whose
    reputation falls under the floor. Held-out tasks are answered without lessons, with each node's
    own, with the fleet's, poisoned and after feedback, each with a 95% interval. By default the
    nodes run in this process on one shared log; with --nats they are `dso node start` processes
    on a local NATS JetStream cluster and the agents reach them through their HTTP APIs.

    The last act needs no task file and no reference: agent A (the 1.5B) fails, reads the error
    and fixes its line through `dso proxy --learn`, which files the lesson in its node; the node
    publishes it, and agent B (the 0.5B) passes a task it failed, on its first try.

    The model's answers are kept in an answer cache: the first run generates them (about 12
    minutes on two quiet cores, the models' assembly included), a rerun replays them and runs
    everything else again (nodes, sharing, attacks, DeltaSoup, the sandboxed checks) in about a
    minute; --fresh-answers ignores the cache.

    \b
    Examples:
      dso demo
      dso demo --nats                          # the same fleet as processes over NATS
      dso demo --facts 6 --eval-per-fact 4     # a smaller run
      dso demo --llm http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct
    """
    from dsonet.bench.html_report import conditions_from_demo, write_html_report
    from dsonet.demo import DemoConfig, format_report, run_demo
    from dsonet.demo.job import job_record

    if fresh_answers:
        options["answer_cache"] = None
    if options["threads"] is None and options["llm_url"] is None:
        from dsonet.learn.llama_llm import idle_threads

        options["threads"] = idle_threads()
    report = asyncio.run(run_demo(DemoConfig(**options), echo=click.echo))
    click.echo(format_report(report))
    json_out.parent.mkdir(parents=True, exist_ok=True)
    results = report.to_dict()
    json_out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    page = write_html_report(json_out.with_suffix(".html"), "dso demo: a fleet of coding agents learns its libraries",
                             conditions_from_demo(results), lessons=results["lessons"], example=results["example"],
                             sections={} if report.job is None else {"On the job": job_record(report.job)})
    click.echo(f"wrote {json_out} and {page}")
