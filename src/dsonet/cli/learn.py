"""`dso learn`, `dso ask`, `dso eval`: learn experiences from rollouts, and use them."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import click

from dsonet.cli.options import db_option, db_path, environment, environment_options, json_option, min_similarity_option
from dsonet.scope import probe
from dsonet.errors import DsoError


def llm_options(fn):
    """--llm / --model / --concurrency / --timeout, shared by every command that talks to an LLM."""
    fn = click.option("--timeout", default=120.0, show_default=True, help="Seconds per request to a server.")(fn)
    fn = click.option("--concurrency", default=16, show_default=True,
                      help="Requests in flight at once to a server (keep a vLLM cluster busy).")(fn)
    fn = click.option("--model", default=None,
                      help="Served model name (with --llm URL); locally an embedded model (qwen2.5-coder-1.5b, "
                           "qwen2.5-coder-0.5b, smollm2), a .gguf file or a HF folder.")(fn)
    fn = click.option("--llm", "url", default=None, metavar="URL",
                      help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (env OPENAI_BASE_URL; "
                           "default: the embedded Qwen2.5-Coder-0.5B on llama.cpp).")(fn)
    return fn


def open_llm(url, model, concurrency, timeout):
    from dsonet.learn.llm import open_llm as _open

    if url is None or url == "local":
        return _open(url, model)
    return _open(url, model, max_concurrency=concurrency, timeout=timeout)


def open_library(path: Path, create: bool = True):
    """``create``: False for the commands that only read lessons (ask, eval), which never make a library."""
    from dsonet.library import Library

    return Library(str(path), create=create)


def parse_config(pairs: tuple[str, ...]) -> dict:
    """key=value pairs for a task generator; values read as JSON when they parse (numbers, booleans)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value (e.g. max_terms=3)", param_hint="--config")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def task_options(fn):
    fn = click.option("--seed", default=0, show_default=True, help="Seed of the task generator and the split.")(fn)
    fn = click.option("--held-out", default=0.2, show_default=True,
                      help="Fraction of tasks kept for `dso eval` (learning never sees them).")(fn)
    fn = click.option("--verifier", default="numeric", show_default=True,
                      type=click.Choice(["numeric", "exact", "contains"]), help="Verifier for jsonl: tasks.")(fn)
    fn = click.option("--config", "config", multiple=True, metavar="KEY=VALUE",
                      help="Task generator setting (repeatable), e.g. --config max_terms=2.")(fn)
    fn = click.option("--size", default=50, show_default=True, help="Tasks to draw (before the split).")(fn)
    return fn


def load_split(task, size, config, verifier, held_out, seed):
    from dsonet.learn.tasks import load_tasks

    return load_tasks(task, size=size, seed=seed, verifier_name=verifier, **parse_config(config)).split(held_out, seed)


@click.command()
@click.argument("task", required=False)
@db_option
@llm_options
@task_options
@click.option("--telemetry", type=click.Path(exists=True, path_type=Path),
              help="Learn from tool telemetry JSONL ({tool, input, output, reward} per line) instead of rollouts.")
@click.option("--epochs", default=3, show_default=True)
@click.option("--batch-size", default=8, show_default=True, help="Queries per library update.")
@click.option("--group-size", default=5, show_default=True, help="Rollouts per query (G).")
@click.option("--temperature", default=0.7, show_default=True)
@click.option("--max-tokens", default=128, show_default=True, help="Tokens per rollout.")
@click.option("--run-dir", type=click.Path(path_type=Path), default=None,
              help="State and JSONL run log; rerun with the same dir to resume (default: <library>.runs/<task>).")
@min_similarity_option
@click.option("--node-id", default="", help="Recorded in each experience's provenance.")
@click.option("--validation", type=click.IntRange(min=0), default=0, show_default=True,
              help="Training tasks held apart as the quality gate's slice (0: no gate); 40 or more keeps it out of noise.")
@click.option("--reflector", default=None,
              help="Embedded model that writes the lessons while --model answers [default for code: tasks: "
                   "qwen2.5-coder-1.5b with the embedded agent].")
@click.option("--python", "python", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="code: tasks run in the sandbox over this interpreter: the environment to learn [default: env "
                   "DSONET_SANDBOX_PYTHON, else this Python].")
@click.option("--candidates", default=2, show_default=True,
              help="code: tasks: sampled lessons per group, of which the validation gate keeps the best.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def learn(task, db, url, model, concurrency, timeout, size, config, verifier, held_out, seed, telemetry,
          epochs, batch_size, group_size, temperature, max_tokens, run_dir, min_similarity, node_id, validation,
          reflector, python, candidates, quiet, as_json):
    """Learn experiences with training-free GRPO: G rollouts per query, every rollout summarised
    with the reference answer, the group's advantage from all G summaries, then one batch of
    ADD / UPDATE / DELETE / NONE per step. With --validation N, a lesson is kept only if accuracy
    on N held-apart training tasks with it is not below accuracy without it nor below accuracy
    with neutral text of its length (a longer prompt alone moves small models), and the run ends
    with the library of its best validation epoch.

    TASK is `gsm8k`, `rg:<reasoning-gym generator>` (e.g. rg:chain_sum), `jsonl:<file>` of
    {"question", "answer"} lines, or `code:<file>` of {"task", "setup", "reference"} lines: one
    line of Python against the libraries of the environment --python names, each attempt run in
    the sandbox and checked against the reference's r; the reflector sees each attempt with its
    error line. Learning uses the training part of the split; `dso eval` with the same
    --size/--seed/--held-out measures on the rest. Interrupted runs resume.

    \b
    Examples:
      dso learn code:tasks.jsonl --db lib.db --python .venv/bin/python --validation 8
      dso learn rg:chain_sum --db lib.db --size 80 --validation 40 --config max_terms=2 --max-tokens 64
      dso learn gsm8k --db lib.db --llm http://localhost:8000/v1 --model Qwen/Qwen3-8B
      dso learn --telemetry tools.jsonl --db lib.db
    """
    from dsonet.learn.code_tasks import load_code_tasks
    from dsonet.learn.context import Retrieval
    from dsonet.learn.grpo import LearnConfig, Learner
    from dsonet.learn.tasks import telemetry_groups

    if not task and not telemetry:
        raise click.UsageError("give a TASK (e.g. rg:chain_sum) or --telemetry FILE")
    library_path = db_path(db)
    try:
        code = load_code_tasks(task.removeprefix("code:")) if task and task.startswith("code:") else None
        llm = open_llm(url, model, concurrency, timeout)
        lib = open_library(library_path)
        cfg = LearnConfig(group_size=group_size, temperature=temperature, max_tokens=max_tokens, epochs=epochs,
                          batch_size=batch_size, seed=seed, retrieval=Retrieval(min_similarity=min_similarity))
        if code is not None:
            stats, run_dir = _learn_code(task, code, llm, url, lib, cfg, library_path, run_dir, node_id, held_out, seed,
                                         validation, reflector, python, candidates, quiet)
        elif telemetry:
            records = [json.loads(line) for line in telemetry.read_text().splitlines() if line.strip()]
            learner = Learner(llm, lib, cfg, run_dir, node_id)
            learner.learn_groups(telemetry_groups(records))
            stats = learner.stats
        else:
            train, _ = load_split(task, size, config, verifier, held_out, seed)
            if validation >= len(train.tasks):
                raise click.BadParameter(f"{validation} of {len(train.tasks)} training tasks leaves none to learn "
                                         "from; raise --size or lower --validation", param_hint="--validation")
            val = train.subset(train.tasks[:validation]) if validation else None
            train = train.subset(train.tasks[validation:])
            run_dir = run_dir or library_path.with_name(library_path.name + ".runs") / task.replace(":", "_").replace("/", "_")
            stats = Learner(llm, lib, cfg, run_dir, node_id).run(train, progress=not quiet, validation=val)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"stats": dataclasses.asdict(stats), "db": str(library_path),
                               "log": f"{run_dir}/log.jsonl" if run_dir else None}, default=str))
        return
    click.echo(f"batches {stats.batches}  rollouts {stats.rollouts}  mean reward {stats.mean_reward:.3f}  "
               f"mixed groups {stats.mixed_groups}/{stats.groups}  proposals {stats.proposals}  "
               f"skipped {stats.skipped}")
    click.echo("operations " + "  ".join(f"{k} {v}" for k, v in stats.operations.items()) +
               f"  tokens {stats.tokens}" + (f"  log {run_dir}/log.jsonl" if run_dir else ""))


def _learn_code(task, tasks, llm, url, lib, cfg, library_path, run_dir, node_id, held_out, seed, validation,
                reflector, python, candidates, quiet):
    """`dso learn code:<file>`: the user's code tasks, attempts run in the sandbox over --python."""
    from dsonet.learn.code_tasks import imported_modules
    from dsonet.learn.drift import drift_taskset
    from dsonet.learn.grpo import Learner
    from dsonet.learn.llm import open_llm as open_embedded
    from dsonet.learn.sandbox import Sandbox

    python = python or os.environ.get("DSONET_SANDBOX_PYTHON") or sys.executable
    sandbox = Sandbox(python=python, preload=imported_modules(tasks))
    train, _ = drift_taskset(tasks, sandbox, task).split(held_out, seed)
    if validation >= len(train.tasks):
        raise click.BadParameter(f"{validation} of {len(train.tasks)} training tasks leaves none to learn from; "
                                 "add tasks or lower --validation", param_hint="--validation")
    val = train.subset(train.tasks[:validation]) if validation else None
    train = train.subset(train.tasks[validation:])
    if reflector is None and url is None:
        reflector = "qwen2.5-coder-1.5b"  # the 0.5B writes no usable lesson about an environment
    teacher = open_embedded(None, reflector) if reflector else None
    cfg = dataclasses.replace(cfg, all_failed=True, rule_lessons=True, rule_first=True, repair_check=True,
                              candidates=candidates, gate_gain=1e-9 if val else 0.0)
    run_dir = run_dir or library_path.with_name(library_path.name + ".runs") / Path(task).stem.replace(":", "_")
    environment = probe(str(sandbox.python))  # the lessons learned hold where the attempts ran
    with sandbox:
        stats = Learner(llm, lib, cfg, run_dir, node_id, teacher, environment=environment).run(
            train, progress=not quiet, validation=val)
    return stats, run_dir


@click.command()
@click.argument("question")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), envvar="DSONET_DB", default=None,
              help="Library to retrieve from (env DSONET_DB; neither given: ask without experiences).")
@llm_options
@click.option("-k", "k", type=click.IntRange(1, 100), default=5, show_default=True, help="Experiences retrieved at most.")
@min_similarity_option
@click.option("--context-tokens", default=2048, show_default=True, help="Token budget of injected experiences.")
@click.option("--max-tokens", default=256, show_default=True, help="Tokens in the answer.")
@click.option("--show-prompt", is_flag=True, help="Print the prompt with the injected experiences.")
@click.option("--feedback", type=click.Choice(["ask", "helped", "harmed"]), default=None,
              help="Record an outcome on the lessons used: ask after the answer, or give it.")
@environment_options
@json_option
def ask(question, db, url, model, concurrency, timeout, k, min_similarity, context_tokens, max_tokens,
        show_prompt, feedback, scope, python, as_json):
    """Answer QUESTION with the library's most relevant experiences in the system message
    (k = 5 at or above the space's calibrated threshold, at most 2048 tokens, as plain bullets). With --feedback, the
    lessons used get an outcome (helped or not), which feeds eviction by usefulness.

    \b
    Example:
      dso ask "State the final answer: 12 - 7 + 3 =" --db lib.db --show-prompt
      dso ask "Integrate y over x with numpy" --db lib.db --python .venv/bin/python
    """
    from dsonet.cli.library import empty_answer
    from dsonet.learn.context import Retrieval
    from dsonet.learn.evaluate import ask as _ask
    from dsonet.library.contract import record_on_members

    try:
        llm = open_llm(url, model, concurrency, timeout)
        lib = open_library(db, create=False) if db else None
        env = environment(scope, python)
        answer = _ask(llm, lib, question, Retrieval(k, min_similarity, context_tokens), max_tokens=max_tokens,
                      environment=env)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from exc
    prompt = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in answer.chat)
    if as_json:
        searched = {} if lib is None else {"threshold": answer.hits.threshold, "best_score": answer.hits.best_score}
        held = [b.to_dict() for b in answer.hits.held_back]
        click.echo(json.dumps({"answer": answer.text, "prompt": prompt, "messages": answer.chat,
                               "lessons": [h.summary() for h in answer.hits], "held_back": held, **searched}))
    else:
        for hit in answer.hits:
            click.echo(f"[{hit.score:.2f}] {hit.experience.text}", err=True)
        for b in answer.hits.held_back:
            click.echo(f"held back {b.id[:12]}: {b.reason}  {b.text}", err=True)
        if lib is not None and not answer.hits:
            click.echo(empty_answer(answer.hits.threshold, answer.hits.best_score, len(answer.hits.held_back)),
                       err=True)
        if show_prompt:
            click.echo(prompt + "\n---", err=True)
        click.echo(answer.text)
    if feedback and lib is not None and answer.hits:
        helped = feedback == "helped" or (feedback == "ask" and click.confirm("Did the answer help?", err=True))
        n = record_on_members(lib, answer.hits, helped, env)
        click.echo(f"recorded {'helped' if helped else 'harmed'} on {n} lesson(s)", err=True)


@click.command(name="eval")
@click.argument("task")
@click.option("--db", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="DSONET_DB", required=True,
              help="The library learned by `dso learn` (env DSONET_DB).")
@llm_options
@task_options
@click.option("--max-tokens", default=128, show_default=True)
@min_similarity_option
@json_option
def evaluate(task, db, url, model, concurrency, timeout, size, config, verifier, held_out, seed, max_tokens,
             min_similarity, as_json):
    """Accuracy on the held-out split with and without experiences: same tasks, greedy answers;
    95% interval of the difference by paired bootstrap, McNemar's p, Wilson for each, coverage
    and parse failures. Each lesson used gets its outcome recorded in the library.

    \b
    Example:
      dso eval rg:chain_sum --db lib.db --size 40 --config max_terms=2 --max-tokens 64
    """
    from dsonet.learn.context import Retrieval
    from dsonet.learn.evaluate import evaluate as _evaluate

    try:
        llm = open_llm(url, model, concurrency, timeout)
        _, test = load_split(task, size, config, verifier, held_out, seed)
        result = _evaluate(llm, test, open_library(db, create=False), max_tokens=max_tokens,
                           retrieval=Retrieval(min_similarity=min_similarity))
    except DsoError as exc:
        raise click.ClickException(str(exc)) from exc
    d = result.to_dict()
    if as_json:
        click.echo(json.dumps({"llm": llm.name, "task": task, **d}))
        return
    click.echo(f"{llm.name} on {task}: n = {d['n_eval']}, greedy\n"
               f"  without experiences {d['accuracy_without']:.3f}  Wilson 95% {d['wilson_without']}\n"
               f"  with experiences    {d['accuracy_with']:.3f}  Wilson 95% {d['wilson_with']}\n"
               f"  difference 95% CI (paired bootstrap) {d['ci95']}  McNemar p {d['p_mcnemar']}\n"
               f"  coverage {d['coverage']}  parse failures {d['parse_failures']}  tokens {d['tokens']}")
