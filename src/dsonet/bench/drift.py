"""`dso bench learn --family drift`: a fleet of coding agents learns its environment together.

One configuration of the drift scenario (`dsonet.sim.scenario`, whose other configuration is
`dso demo`): per (agent model, learning seed), on real in-process nodes on one shared log, with
``other_agents`` honest nodes whose agent is the other embedded model (the heterogeneous fleet)
and the 1.5B as every node's reflector by default. Each honest node practises on its own facts
only; the held-out instances cover every fact and the controls, so what the fleet knows beyond
one node is measured directly (fleet − own).

Held-out answers under every condition, the same items and prompts but for the notes: none; own
(each node's own library); neutral text of the own lessons' lengths; the hand-written reference
lesson of the item's fact; the poison lesson of the item's fact alone (as a peer's note); fleet
(after every honest node published and read the others'); cross-model (the fleet's lessons
written from the other model's rollouts only); poisoned (after a Byzantine node published a
plausible wrong lesson for every fact, honestly encoded and signed); and poisoned after feedback:
every honest node's agent solves ``feedback_tasks`` training and validation instances with its
library and reports each execution result as the outcome of the lessons it was given, which
moves their signers' reputation; a signer under the floor has its rows hidden. No node is told
who is Byzantine.

Answers are greedy and cached (`CachedLLM`); a rerun replays from the cache, so a run interrupted
after hours restarts in minutes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import click
import numpy as np

from dsonet.bench.html_report import conditions_from_learn_row, write_html_report
from dsonet.bench.report import RESULTS_DIR, format_table, write_results
from dsonet.encoders.cache import cache_dir
from dsonet.learn import drift
from dsonet.learn.cache import CachedLLM
from dsonet.learn.context import Retrieval
from dsonet.learn.evaluate import mcnemar, paired_bootstrap
from dsonet.learn.llm import open_llm
from dsonet.learn.sandbox import Sandbox
from dsonet.library.policy import default_min_similarity
from dsonet.sim import adversary
from dsonet.sim.report import example, hidden, lesson_tokens, measure
from dsonet.sim.scenario import (OTHER, REFLECTOR, DriftPlan, Scenario, facts_for, fact_of, learn_config,
                                 make_splits, poison_notes, reference_notes, running, taskset)

CONDITIONS = ("without", "own", "neutral", "reference", "poison_only", "fleet", "cross_model", "poisoned",
              "poisoned_after_feedback")
GITCHAMELEON = {"benchmark": "GitChameleon (version-conditioned Python problems, checked by execution)",
                "gpt-4o_pass@10": 0.399, "gpt-4o_pass@10_error_feedback": 0.437,
                "v2_enterprise_models": [0.48, 0.51]}
FULL = DriftPlan()
QUICK = DriftPlan(agents=2, other_agents=1, facts=6, train_per_fact=2, held_out_per_fact=2, feedback_tasks=8)


async def run_seed(agent, other, reflector, plan: DriftPlan, seed: int, root: Path, log=print) -> dict:
    """Every condition's per-item correctness for one agent model and learning seed, and the run's facts."""
    t0 = time.perf_counter()
    splits = make_splits(plan, seed)
    workdir = root / f"seed{seed}"
    shutil.rmtree(workdir, ignore_errors=True)  # nodes start empty; the answer cache makes a rerun cheap
    workdir.mkdir(parents=True)
    log(f"  drift seed {seed}: {sum(map(len, splits.train))} training / {len(splits.validation)} validation / "
        f"{len(splits.held_out)} held-out instances of {len(facts_for(plan))} facts on {plan.honest} honest nodes")
    with Sandbox(preload=drift.PRELOAD) as sandbox:
        tasks = taskset(splits, sandbox)
        async with running(False, plan.honest, workdir, agent.name) as fleet:
            threshold = plan.min_similarity
            if threshold is None:
                threshold = default_min_similarity(fleet.encoder)
            llms = [agent] * plan.agents + [other] * plan.other_agents
            scenario = Scenario(fleet, tasks, splits, plan, llms, reflector,
                                Retrieval(k=plan.k, min_similarity=threshold), workdir, log)
            return await _conditions(scenario, seed, t0)


async def _conditions(s: Scenario, seed: int, t0: float) -> dict:
    """The scenario's steps with every condition of the bench measured after each."""
    plan, fleet = s.plan, s.fleet
    learned = await s.learn(learn_config(plan, s.retrieval, seed))
    runs = {"without": await s.answer("without", stores=False)}
    runs["own"] = await s.answer("own")
    runs["neutral"] = await s.answer("neutral", notes=s.neutral_notes(runs["own"]))
    runs["reference"] = await s.answer("reference", notes=reference_notes)
    runs["poison_only"] = await s.answer("poison_only", notes=poison_notes)
    await s.share()
    runs["fleet"] = await s.answer("fleet")
    runs["cross_model"] = await s.answer("cross_model", exclude=s.from_nodes(set(fleet.node_ids[plan.agents:])))

    byz = adversary.byzantine_nodes(plan.poisoners, "drift-byzantine")
    poison_texts = await s.poison(byz)
    runs["poisoned"] = await s.answer("poisoned")
    outcomes = await s.feedback()
    # per honest node, after how many feedback tasks its outcomes convicted each poisoner (None: never)
    outcomes["poisoners_convicted_after"] = [[c.get(b.node_id) for b in byz] for c in outcomes["convicted_after"]]
    runs["poisoned_after_feedback"] = await s.answer("poisoned_after_feedback")
    counted = hidden(await s.close(), {b.node_id for b in byz})
    s.log(f"    poison rows hidden (least of the honest nodes) {counted['poison_rows_hidden']:.2f}, "
          f"honest peers' rows hidden (most) {counted['honest_rows_hidden']:.2f}")
    held = s.held
    return {
        "items": [{"id": t.id, "fact": t.entry["fact"], "library": fact_of(t).library,
                   "control": fact_of(t).change == "control"} for t in held.tasks],
        "correct": {c: r.correct.astype(int).tolist() for c, r in runs.items()},
        "injected": {c: r.injected.astype(int).tolist() for c, r in runs.items()},
        "facts": {"seed": seed, "learning": learned, "min_similarity": s.retrieval.min_similarity,
                  "poison": poison_texts, "feedback": outcomes, **counted, "example": example(held, runs),
                  "lesson_tokens": lesson_tokens(runs["fleet"]),
                  "answer_tokens": {c: r.tokens for c, r in runs.items()},
                  "wall_s": round(time.perf_counter() - t0, 1)}}


# -- statistics over seeds --------------------------------------------------------------------------

def summarise(llm_name: str, per_seed: list[dict]) -> dict:
    """One bench row pooled over seeds: accuracies on the change facts, intervals, the controls, per
    library, poison hidden, what the fleet recovered of the reference. Every seed answers the same
    held-out items, so an item is one task however many seeds answered it: the intervals resample
    items with all their seeds' answers (``n_eval`` counts items, ``n_answers`` their answers)."""
    items = [it for s in per_seed for it in s["items"]]
    cat = {c: np.concatenate([np.array(s["correct"][c], float) for s in per_seed]) for c in CONDITIONS}
    ids = np.array([it["id"] for it in items])
    control = np.array([it["control"] for it in items], bool)
    change = ~control

    def pairs(a: str, b: str, mask: np.ndarray) -> list[float]:
        lo, hi = paired_bootstrap(cat[a][mask], cat[b][mask], tasks=ids[mask])
        return [round(lo, 4), round(hi, 4)]

    conditions = {c: measure(c, v[change], cat["without"][change], tasks=ids[change]) for c, v in cat.items()}
    acc = {c: m.accuracy for c, m in conditions.items()}
    name = lambda c: "with" if c == "own" else c  # noqa: E731  (the rows' existing name for own lessons)
    row = {"llm": llm_name, "task": "drift", "n_eval": conditions["without"].n, "n_answers": int(change.sum()),
           "n_control": int(np.unique(ids[control]).size), "seeds": len(per_seed)}
    row.update({f"accuracy_{name(c)}": acc[c] for c in CONDITIONS})
    row["wilson"] = {c: list(conditions[c].wilson95) for c in CONDITIONS}
    for c in CONDITIONS[1:]:
        row[f"ci95_{name(c)}"] = list(conditions[c].minus_without_ci95)
    row["p_mcnemar"] = {c: round(mcnemar(cat[c][change], cat["without"][change], ids[change]), 4)
                        for c in CONDITIONS[1:]}
    row["ci95_fleet_vs_own"] = pairs("fleet", "own", change)
    row["ci95_with_vs_neutral"] = pairs("own", "neutral", change)
    row["ci95_after_feedback_vs_fleet"] = pairs("poisoned_after_feedback", "fleet", change)
    if control.any():
        row["accuracy_control_without"] = round(float(cat["without"][control].mean()), 4)
        row["accuracy_control_fleet"] = round(float(cat["fleet"][control].mean()), 4)
        row["ci95_control"] = pairs("fleet", "without", control)
    libs = np.array([it["library"] for it in items])
    row["by_library"] = {lib: {"n_eval": int(np.unique(ids[m := change & (libs == lib)]).size),
                               "accuracy_without": round(float(cat["without"][m].mean()), 4),
                               "accuracy_fleet": round(float(cat["fleet"][m].mean()), 4),
                               "ci95_fleet": pairs("fleet", "without", m)}
                         for lib in sorted(set(libs[change]))}
    row["coverage"] = {c: round(float(np.concatenate([s["injected"][c] for s in per_seed]).mean()), 4)
                       for c in ("own", "fleet", "cross_model", "poisoned", "poisoned_after_feedback")}
    row["poison_rows_hidden"] = min(s["facts"]["poison_rows_hidden"] for s in per_seed)
    row["honest_rows_hidden"] = max(s["facts"]["honest_rows_hidden"] for s in per_seed)
    needed = [n for s in per_seed for node in s["facts"]["feedback"].get("poisoners_convicted_after", [[None]])
              for n in node]
    row["feedback_tasks_to_convict"] = None if None in needed else max(needed)  # the most any node needed
    gap = acc["reference"] - acc["without"]
    row["recovered"] = round((acc["fleet"] - acc["without"]) / gap, 4) if gap > 0 else None
    row["lesson_prompt_tokens"] = round(float(np.mean([s["facts"]["lesson_tokens"] for s in per_seed])), 1)
    row["per_fact"] = _per_fact([it["fact"] for it in items], ids, cat)
    row["per_seed"] = [s["facts"] | {"accuracy": {c: round(float(np.mean(s["correct"][c])), 4) for c in CONDITIONS}}
                       for s in per_seed]
    row["wall_s"] = round(sum(s["facts"]["wall_s"] for s in per_seed), 1)
    return row


def _per_fact(facts: list[str], ids: np.ndarray, cat: dict) -> dict:
    """Every fact's held-out accuracy per condition (none dropped), over its items' answers in every seed."""
    of = np.array(facts)
    return {f: {"n": int(np.unique(ids[m := of == f]).size), **{c: round(float(cat[c][m].mean()), 4) for c in CONDITIONS}}
            for f in dict.fromkeys(of)}


# -- running and combining ---------------------------------------------------------------------------

def seed_name(model: str, seed: int, probation: bool = False) -> str:
    return f"learn-drift-{'probation-' if probation else ''}{model.replace('/', '_')}-seed{seed}"


def cached_models(model: str, reflector: str | None = None, quick: bool = False
                  ) -> tuple[CachedLLM, CachedLLM, CachedLLM]:
    """The seed's agent (``model``), the fleet's other agent and the reflector, on the bench's one answer cache."""
    if model not in OTHER:
        raise ValueError(f"model: {model!r}; the drift fleet mixes the embedded models, choose one of {sorted(OTHER)}")
    cache = cache_dir() / "bench-learn" / ("drift-answers-quick.sqlite" if quick else "drift-answers.sqlite")
    agent, other, teacher = (CachedLLM(open_llm(None, key), cache)
                             for key in (model, OTHER[model], reflector or REFLECTOR))
    return agent, other, teacher


def run(model: str, plan: DriftPlan, quick: bool = False, reflector: str | None = None, log=print) -> list[Path]:
    """Each learning seed of ``plan`` with ``model`` as the evaluated agent: one result file per seed
    (bench/results/learn-drift-<model>-seed<s>.json), so a long run goes in chunks, pooled by `combine`."""
    agent, other, teacher = cached_models(model, reflector, quick)
    # a plan with probation learns other lessons: its nodes and result files stand apart (the answers are shared)
    runs = ("drift-quick" if quick else "drift") + ("-probation" if plan.probation else "")
    root = cache_dir() / "bench-learn" / runs / model
    paths = []
    for seed in plan.seeds:
        hits, misses = agent.hits + other.hits + teacher.hits, agent.misses + other.misses + teacher.misses
        data = asyncio.run(run_seed(agent, other, teacher, plan, seed, root, log))
        data["facts"]["answers"] = {"generated": agent.misses + other.misses + teacher.misses - misses,
                                    "from_cache": agent.hits + other.hits + teacher.hits - hits}
        paths.append(write_results(seed_name(model, seed, plan.probation), {"llm": model, "other_agent": other.name,
                                                            "reflector": teacher.name, "plan": asdict(plan),
                                                            "quick": quick, **data}, quick=quick))
        log(f"  wrote {paths[-1]}")
    return paths


def combine(paths: list[Path], out: str = "learn-drift", quick: bool = False) -> Path:
    """Pool per-seed result files into one row per agent model: bench/results/<out>.json and its plot."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    models = list(dict.fromkeys(p["llm"] for p in parts))
    rows = [summarise(m, [p for p in parts if p["llm"] == m]) for m in models]
    print(format_table(rows, ["llm", "n_eval", "seeds", "accuracy_without", "accuracy_with", "accuracy_neutral",
                              "accuracy_fleet", "accuracy_cross_model", "accuracy_poisoned",
                              "accuracy_poisoned_after_feedback", "accuracy_poison_only", "accuracy_reference",
                              "recovered", "poison_rows_hidden", "honest_rows_hidden"]))
    path = write_results(out, {"rows": rows, "context": GITCHAMELEON, "combined_from": [Path(p).name for p in paths],
                               "plan": parts[0]["plan"], "reflector": parts[0]["reflector"]}, quick=quick)
    plot(rows, path.with_suffix(".png"))
    first = parts[0]["facts"]
    write_html_report(path.with_suffix(".html"), f"dso bench learn --family drift ({rows[0]['llm']})",
                      conditions_from_learn_row(rows[0]),
                      lessons=[{"text": t, "node": n["node"], "agent": n["agent"]} for n in first["learning"]
                               for t in n["lessons"]],
                      example=first.get("example"), notes=[f"seed {first['seed']}'s lessons and example; "
                                                           f"{len(parts)} result files pooled: {', '.join(Path(p).name for p in paths)}"])
    return path


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(rows)
    for j, row in enumerate(rows):
        xs = np.arange(len(CONDITIONS)) + (j - len(rows) / 2 + 0.5) * width
        mid = np.array([row[f"accuracy_{'with' if c == 'own' else c}"] for c in CONDITIONS])
        lo_hi = np.array([row["wilson"][c] for c in CONDITIONS])
        ax.bar(xs, mid, width, yerr=[mid - lo_hi[:, 0], lo_hi[:, 1] - mid], capsize=2,
               label=f"{row['llm']} (n={row['n_eval']} items x {row['seeds']} seed(s))")
    ax.set_xticks(np.arange(len(CONDITIONS)), [c.replace("_", " ") for c in CONDITIONS], fontsize=7, rotation=20)
    ax.set_ylabel("held-out accuracy (Wilson 95%)")
    ax.set_title("drift: one line against the installed libraries, checked by execution", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def seed_files(model: str | None = None, quick: bool = False, probation: bool = False) -> list[Path]:
    """The per-seed result files written so far (of one model, or all), of plans with probation or without."""
    stem = seed_name(model, 0, probation).removesuffix("-seed0") if model else "learn-drift-"
    return sorted(p for p in RESULTS_DIR.glob(f"{stem}*-seed*{'-quick' if quick else ''}.json")
                  if quick == p.stem.endswith("-quick") and probation == p.stem.startswith("learn-drift-probation-"))


def main(quick: bool, seeds: str | None, held_out: int | None, model: str, reflector: str | None, n_facts: int | None,
         feedback_tasks: int | None, combine_names: str | None, out_name: str | None, probation: bool = False) -> None:
    """`dso bench learn --family drift` (its options parsed by `dsonet.bench.learn.cli`)."""
    if combine_names:
        path = combine([RESULTS_DIR / f"{name}.json" for name in combine_names.split(",")], out_name or "learn-drift")
        click.echo(f"wrote {path} and {path.with_suffix('.png')}")
        return
    plan = QUICK if quick else FULL
    if seeds:
        plan = replace(plan, seeds=tuple(int(s) for s in seeds.split(",")))
    if held_out:
        plan = replace(plan, held_out_per_fact=held_out)
    if n_facts:
        plan = replace(plan, facts=n_facts)
    if feedback_tasks:
        plan = replace(plan, feedback_tasks=feedback_tasks)
    plan = replace(plan, probation=probation)
    log = lambda msg: click.echo(f"[{time.strftime('%H:%M:%S')}] {msg}")  # noqa: E731
    try:
        run(model, plan, quick, reflector, log)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from exc
    path = combine(seed_files(quick=quick, probation=probation),
                   out_name or ("learn-drift-probation" if probation else "learn-drift"), quick)
    click.echo(f"wrote {path} and {path.with_suffix('.png')}")
