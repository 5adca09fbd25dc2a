"""`dso bench gate`: how often the execution gate keeps a wrong lesson.

The learner keeps a lesson only if it fixes validation items nearest it (`Learner.gate`, as the drift
scenario configures it: ``gate_items`` nearest + half as many others, gain over max(without,
neutral text) > 0). Lessons checked by hand give the gate's error rates: every change fact's
hand-written correct lesson (`Fact.lesson`) and its plausible wrong one (`Fact.poison`, what the
Byzantine node publishes), each put to the gate on its own, on the scenario's validation instances
(seed 0's split), with the evaluated agent answering. A wrong lesson kept is a false keep; a correct
lesson refused is a lesson the fleet will never learn, however well the reflector writes it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import click

from dsonet.bench.report import format_table, write_results
from dsonet.encoders import default_encoder
from dsonet.encoders.cache import cache_dir
from dsonet.learn import drift
from dsonet.learn.cache import CachedLLM
from dsonet.learn.context import Retrieval
from dsonet.learn.episodes import PROBATION
from dsonet.learn.grpo import Learner
from dsonet.learn.llm import open_llm
from dsonet.learn.operations import Operation, Proposal
from dsonet.learn.sandbox import Sandbox
from dsonet.library import Library
from dsonet.library.policy import default_min_similarity
from dsonet.sim.scenario import DOMAIN, DriftPlan, facts_for, learn_config, make_splits, taskset

KINDS = ("correct", "wrong")


def audit(llm, plan: DriftPlan, seed: int = 0, log=print) -> dict:
    """Per change fact, whether the gate keeps its correct and its wrong lesson; the keep rates."""
    t0 = time.perf_counter()
    splits = make_splits(plan, seed)
    encoder = default_encoder()
    config = learn_config(plan, Retrieval(k=plan.k, min_similarity=default_min_similarity(encoder)), seed)
    facts = [f for f in facts_for(plan) if f.poison]
    with Sandbox(preload=drift.PRELOAD) as sandbox, tempfile.TemporaryDirectory(prefix="dso-gate-audit-") as tmp:
        tasks = taskset(splits, sandbox)
        store = Library(Path(tmp) / "library.sqlite", encoder=encoder)
        learner = Learner(llm, store, config, Path(tmp) / "run", reflector=llm, encoder=encoder)
        learner.use_validation(tasks.subset(splits.validation, "drift:validation"))
        log(f"  gate audit: {len(facts)} change facts x {KINDS}, gate on {config.gate_items} nearest of "
            f"{len(splits.validation)} validation instances + {config.gate_items // 2} other, agent {llm.name}")
        rows = []
        for i, fact in enumerate(facts):
            verdicts = {kind: learner.gate([Operation("ADD", Proposal(text, DOMAIN, 1.0, fact.id))])
                        for kind, text in zip(KINDS, (fact.lesson, fact.poison))}
            rows.append({"fact": fact.id, "library": fact.library,
                         **{f"{k}_kept": bool(v) and v[0].proposal.confidence != PROBATION for k, v in verdicts.items()},
                         **{f"{k}_probation": bool(v) and v[0].proposal.confidence == PROBATION
                            for k, v in verdicts.items()}})
            if (i + 1) % 10 == 0:
                log(f"    {i + 1}/{len(facts)} facts")
        store.close()
    n = len(rows)
    summary = {kind: {"kept": sum(r[f"{kind}_kept"] for r in rows), "probation": sum(r[f"{kind}_probation"] for r in rows),
                      "n": n} for kind in KINDS}
    return {"llm": llm.name, "seed": seed, "gate_items": config.gate_items, "gate_gain": config.gate_gain,
            "probation": config.probation,
            "correct_kept": summary["correct"]["kept"] / n, "wrong_kept": summary["wrong"]["kept"] / n,
            "correct_probation": summary["correct"]["probation"] / n, "wrong_probation": summary["wrong"]["probation"] / n,
            "counts": summary, "facts": rows, "wall_s": round(time.perf_counter() - t0, 1)}


@click.command()
@click.option("--model", default="qwen2.5-coder-0.5b", show_default=True,
              help="The embedded agent that answers the validation instances (the drift bench's evaluated agent).")
@click.option("--seed", default=0, show_default=True, help="The learning seed whose split gives the validation instances.")
@click.option("--quick", is_flag=True, help="The first 6 change facts only: a smoke run of a few minutes.")
@click.option("--probation", is_flag=True,
              help="A lesson that ties at the gate is kept on probation (for outcomes to settle) instead of refused: "
                   "count those apart. Writes bench/results/drift-gate-audit-probation.json.")
def cli(model: str, seed: int, quick: bool, probation: bool) -> None:
    """Put every drift change fact's hand-written correct lesson and its plausible wrong lesson (the
    poison) to the learner's execution gate, each on its own, as the drift scenario configures the
    gate; report how many of each it keeps. Answers are cached with the drift bench's
    (~/.cache/dsonet/bench-learn/drift-answers.sqlite). Writes bench/results/drift-gate-audit.json.

    \b
    Examples:
      dso bench gate --quick
      dso bench gate --model qwen2.5-coder-1.5b
    """
    plan = replace(DriftPlan(), facts=6 if quick else DriftPlan.facts, probation=probation)
    cache = cache_dir() / "bench-learn" / ("drift-answers-quick.sqlite" if quick else "drift-answers.sqlite")
    run(CachedLLM(open_llm(None, model), cache), plan, seed, quick, log=click.echo)


def run(llm, plan: DriftPlan, seed: int = 0, quick: bool = False, log=print) -> Path:
    """The audit, its table printed and its JSON written."""
    result = audit(llm, plan, seed, log=log)
    log(format_table([{"lessons (checked by hand)": kind, "n": result["counts"][kind]["n"],
                       "kept by the gate": result["counts"][kind]["kept"],
                       "on probation": result["counts"][kind]["probation"],
                       "share kept": f"{100 * result[f'{kind}_kept']:.1f}%"} for kind in KINDS],
                     ["lessons (checked by hand)", "n", "kept by the gate", "on probation", "share kept"]))
    path = write_results("drift-gate-audit-probation" if plan.probation else "drift-gate-audit", result, quick=quick)
    log(f"  wrote {path}")
    return path
