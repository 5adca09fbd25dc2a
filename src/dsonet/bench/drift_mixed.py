"""`dso bench learn --family drift --mixed`: a fleet of different machines learns library drift together.

Honest nodes split between two environments, ``per_env`` each: the drift family's (drift.lock,
`.venv-drift`) and an older one (drift-old.lock, `.venv-drift-old`: NumPy 1.26, pandas 2.0, SciPy 1.11,
scikit-learn 1.3, NetworkX 2.8), each node practising on its own facts in its own environment's
sandbox, plus the Byzantine poisoner. The same held-out questions are answered in both environments;
an answer is right where its ``r`` equals the value the fact's reference gives in drift.lock's
environment (in the older one the old form gives it for some facts, and a lesson from the newer one
is wrong there). The facts in play are those with a right answer in both, found by running them
(`classify`, as tests/learn/test_drift_old.py does).

Two fleets of real in-process nodes run the same steps with the same agents (greedy, cached: the
second replays the first's generations wherever its prompts are the same): the scoped fleet (each
lesson scoped to its learner's interpreter, each search carrying the asker's environment, outcomes
counted where they were used) and the unscoped one (today's behaviour: no scope, no environment).
The poisoner aims at each environment: per fact, a lesson wrong there, claiming that environment's
scope (in the unscoped fleet the same texts without one).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import click
import numpy as np

from dsonet.bench.drift_mixed_report import summarise, table
from dsonet.bench.report import RESULTS_DIR, write_results
from dsonet.encoders.cache import cache_dir
from dsonet.learn import drift
from dsonet.learn.cache import CachedLLM, answer_counts
from dsonet.learn.context import Retrieval
from dsonet.learn.llm import open_llm
from dsonet.learn.sandbox import REPO_DRIFT_PYTHON, Sandbox, same
from dsonet.library.policy import default_min_similarity
from dsonet.scope import Probe, Scope, probe
from dsonet.sim import adversary
from dsonet.sim.report import hidden
from dsonet.sim.scenario import DOMAIN, REFLECTOR, DriftPlan, Scenario, Splits, learn_config, running

OLD_PYTHON = REPO_DRIFT_PYTHON.parents[2] / ".venv-drift-old" / "bin" / "python"
ENVS = ("new", "old")
CLASSES = ("old_form_only", "new_form_only", "either", "controls_hold")  # those with a right answer in both
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "networkx")


@dataclass(frozen=True)
class MixedPlan(DriftPlan):
    per_env: int = 2  # honest nodes per environment (the fleet: 2 x per_env honest nodes and the poisoner)
    # facts in play per class (`classify`): every fact whose old form is the one right in the older
    # environment (where the two environments' lessons contradict), and a few of the others
    old_form_only: int = 11
    new_form_only: int = 4
    either: int = 3
    controls: int = 3
    held_out_per_fact: int = 3
    held_out_per_control: int = 1
    feedback_tasks: int = 16  # per honest node, from its environment's training and validation instances

    @property
    def honest(self) -> int:
        return 2 * self.per_env


# FULL: sized for about an hour on 2 free cores with a cold answer cache (the newer environment's nodes learn
# from scratch, ~13 min each; the older ones and the unscoped fleet replay most generations); QUICK: every step
# on 4 facts
FULL = MixedPlan(agents=4, other_agents=0)
QUICK = MixedPlan(agents=4, other_agents=0, old_form_only=2, new_form_only=1, either=0, controls=1,
                  held_out_per_fact=1, feedback_tasks=3, gate_items=1)


def classify(new: Sandbox, old: Sandbox) -> dict[str, str]:
    """fact id -> its class in the older environment, by running one instance in each: whether the
    reference and the old form give there the value the reference gives in drift.lock's environment
    (a fact in no class of ``CLASSES`` has no right answer in both and is left out)."""
    out = {}
    for fact in drift.FACTS:
        task = drift.instances(fact, 1, seed=11)[0]
        setup = task.entry["setup"] + "\n"
        wanted = new.run(setup + task.entry["reference"], result="r")

        def right(line: str) -> bool:
            got = old.run(setup + line, result="r")
            return wanted.ok and got.ok and same(got.value, wanted.value)

        if fact.control:
            out[fact.id] = "controls_hold" if right(task.entry["reference"]) else "controls_differ"
        else:
            out[fact.id] = {(True, False): "old_form_only", (True, True): "either",
                            (False, True): "new_form_only"}.get((right(task.entry["stale"]), right(task.entry["reference"])),
                                                                "neither")
    return out


def facts_in_play(plan: MixedPlan, classes: dict[str, str]) -> list:
    """The plan's number of facts of each class, in the facts file's order."""
    quota = {"old_form_only": plan.old_form_only, "new_form_only": plan.new_form_only, "either": plan.either,
             "controls_hold": plan.controls}
    chosen = []
    for fact in drift.FACTS:
        c = classes[fact.id]
        if quota.get(c, 0) > 0:
            quota[c] -= 1
            chosen.append(fact)
    return chosen


def mixed_splits(plan: MixedPlan, facts: list, seed: int) -> Splits:
    """Per fact: training instances practised in both environments (by the env's nodes in turn, rotated
    by ``seed``), validation and held-out instances shared; the feedback pool from training and validation."""
    train: list[list] = [[] for _ in range(plan.honest)]
    validation, held_out = [], []
    for j, fact in enumerate(facts):
        held = plan.held_out_per_control if fact.control else plan.held_out_per_fact
        n_train, n_val = plan.train_per_fact, plan.validation_per_fact
        items = [replace(t, domain=DOMAIN) for t in drift.instances(fact, n_train + n_val + held, seed=0)]
        for e in range(len(ENVS)):
            train[e * plan.per_env + (j + seed) % plan.per_env] += items[:n_train]
        validation += items[n_train:n_train + n_val]
        held_out += items[n_train + n_val:]
    pool = items_once([t for part in train for t in part] + validation)
    feedback = [pool[i] for i in np.random.default_rng(seed).permutation(len(pool))]
    return Splits(train, validation, held_out, feedback)


def items_once(tasks: list) -> list:
    return list({t.id: t for t in tasks}.values())


def poison_lessons(facts: list, classes: dict[str, str], probes: dict[str, Probe], scoped: bool) -> list[tuple[str, Scope]]:
    """Per fact and environment, a lesson wrong there, claiming that environment's scope (none where not
    ``scoped``): the old form in the newer environment; in the older one the new form where the old is
    the one right there, the old form where only the new is right."""
    wrong = {"new": lambda f: f.poison,
             "old": lambda f: {"old_form_only": f.lesson, "new_form_only": f.poison}.get(classes[f.id])}
    out = []
    for env in ENVS:
        for fact in facts:
            text = None if fact.control else wrong[env](fact)
            if text:
                out.append((text, probes[env].lesson_scope(text) if scoped else Scope()))
    return out


async def run_fleet(scoped: bool, agent, reflector, plan: MixedPlan, seed: int, root: Path, boxes: dict,
                    classes: dict[str, str], facts: list, probes: dict[str, Probe], log) -> dict:
    """One fleet (scoped or today's) through every step; per environment each condition's per-item correctness."""
    t0 = time.perf_counter()
    splits = mixed_splits(plan, facts, seed)
    workdir = root / f"seed{seed}-{'scoped' if scoped else 'unscoped'}"
    shutil.rmtree(workdir, ignore_errors=True)  # nodes start empty; the answer cache makes a rerun cheap
    workdir.mkdir(parents=True)
    everything = items_once(splits.validation + splits.held_out + [t for p in splits.train for t in p])
    tasksets = {"new": drift.drift_taskset(everything, boxes["new"], "drift:new"),
                "old": drift.drift_taskset(everything, boxes["old"], "drift:old", reference=boxes["new"])}
    env_of = [e for e in ENVS for _ in range(plan.per_env)]
    async with running(False, plan.honest, workdir, agent.name) as fleet:
        threshold = plan.min_similarity if plan.min_similarity is not None else default_min_similarity(fleet.encoder)
        s = Scenario(fleet, tasksets["new"], splits, plan, [agent] * plan.honest, reflector,
                     Retrieval(k=plan.k, min_similarity=threshold), workdir, log,
                     node_tasks=[tasksets[e] for e in env_of],
                     probes=[probes[e] if scoped else None for e in env_of])
        log(f"  {'scoped' if scoped else 'unscoped'} fleet, seed {seed}: {len(facts)} facts, "
            f"{len(splits.held_out)} held-out questions in each environment, {plan.honest} honest nodes")
        learned = await s.learn(learn_config(plan, s.retrieval, seed))
        held = {e: tasksets[e].subset(splits.held_out, f"drift:{e}:held-out") for e in ENVS}
        nodes = {e: [i for i, x in enumerate(env_of) if x == e] for e in ENVS}

        async def each(label: str, **kw) -> dict:
            return {e: await s.answer(f"{label} ({e})", held[e], nodes=nodes[e], **kw) for e in ENVS}

        runs = {"without": await each("without", stores=False)} if scoped else {}
        await s.share()
        runs["fleet"] = await each("fleet")
        byz = adversary.byzantine_nodes(plan.poisoners, "drift-mixed-byzantine")
        lessons = poison_lessons(facts, classes, probes, scoped)
        await adversary.publish_poison(fleet, byz, facts, agent.name, DOMAIN, lessons)
        await fleet.settle()
        runs["poisoned"] = await each("poisoned")
        outcomes = await s.feedback()
        runs["after_feedback"] = await each("poisoned after feedback")
        states = await s.close()
    author_env = {fleet.node_ids[i]: env_of[i] for i in range(plan.honest)}
    wrong_scope = {e: [_wrong_scope(hits, e, author_env, probes) for hits in runs["fleet"][e].hits] for e in ENVS}
    skipped = [{p["node_id"] for p in st.peers if p["skipped"]} for st in states]
    byz_ids = {b.node_id for b in byz}
    poison_hidden = hidden(states, byz_ids)["poison_rows_hidden_per_node"]
    return {"items": [{"id": t.id, "fact": t.entry["fact"], "class": classes[t.entry["fact"]]} for t in held["new"].tasks],
            "correct": {c: {e: r[e].correct.astype(int).tolist() for e in ENVS} for c, r in runs.items()},
            "wrong_scope": wrong_scope,
            "nodes": [{"env": env_of[i], "honest_signers_hidden": len(skipped[i] & set(author_env) - {st.node_id}),
                       "poisoner_hidden": bool(skipped[i] & byz_ids),
                       "poison_rows_hidden": poison_hidden[i]} for i, st in enumerate(states)],
            "learning": learned, "feedback": outcomes, "poison": [[t, str(sc)] for t, sc in lessons],
            "wall_s": round(time.perf_counter() - t0, 1)}


def _wrong_scope(hits: list, env: str, author_env: dict[str, str], probes: dict[str, Probe]) -> int:
    """1 where a prompt received an honest lesson from the other environment whose scope there (as its
    learner's interpreter gives it, stated or not) contradicts the asker's environment."""
    for h in hits:
        src = author_env.get(h.experience.provenance.node_id)
        if src not in (None, env) and probes[src].lesson_scope(h.experience.text).fit(
                probes[env].environment).verdict == "contradicts":
            return 1
    return 0


def run(plan: MixedPlan, quick: bool = False, model: str = "qwen2.5-coder-0.5b", reflector: str | None = None,
        log=print, out: str = "learn-drift-mixed") -> Path:
    """Both fleets for each learning seed of ``plan``; bench/results/OUT.json (and its table).
    A seed that file already holds for the same plan and models is kept, not rerun (`finished_seeds`)."""
    cache = cache_dir() / "bench-learn" / ("drift-mixed-answers-quick.sqlite" if quick else "drift-answers.sqlite")
    agent = CachedLLM(open_llm(None, model), cache)
    teacher = agent if quick else CachedLLM(open_llm(None, reflector or REFLECTOR), cache)
    root = cache_dir() / "bench-learn" / ("drift-mixed-quick" if quick else "drift-mixed") / model
    done = finished_seeds(RESULTS_DIR / (f"{out}-quick.json" if quick else f"{out}.json"),
                          plan, model, teacher.name)
    seeds = []
    with Sandbox(preload=drift.PRELOAD) as new, Sandbox(python=OLD_PYTHON, preload=drift.PRELOAD) as old:
        boxes = {"new": new, "old": old}
        probes = {"new": probe(str(new.python)), "old": probe(str(old.python))}
        classes = classify(new, old)
        facts = facts_in_play(plan, classes)
        for seed in plan.seeds:
            if seed in done:
                log(f"seed {seed}: kept from the results file (same plan and models); delete it to rerun")
                seeds.append(done[seed])
                continue
            parts = {scoped: asyncio.run(run_fleet(scoped, agent, teacher, plan, seed, root, boxes, classes, facts,
                                                   probes, log)) for scoped in (True, False)}
            seeds.append({"seed": seed, "scoped": parts[True], "unscoped": parts[False]})
    env_pins = {e: probes[e].environment.only(LIBRARIES).strings() for e in ENVS}
    rows, targets = summarise(seeds, env_pins)
    print(table(rows))
    for name, t in targets.items():
        verdict = {True: "met", False: "NOT met", None: "not measured here"}[t["met"]]
        log(f"  target {name}: {t['value']} -> {verdict}")
    answers = answer_counts(agent, teacher)
    return write_results(out, {"llm": model, "reflector": teacher.name, "plan": asdict(plan),
                                               "quick": quick, "rows": rows, "targets": targets,
                                               "facts": {f.id: classes[f.id] for f in facts}, "seeds": seeds,
                                               "answers": answers}, quick=quick)


def finished_seeds(path: Path, plan: MixedPlan, model: str, reflector: str) -> dict[int, dict]:
    """The seeds a results file already holds for this plan and these models (its seed list aside): a
    second seed pools with the first instead of rerunning it, an hour of two cores a seed."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    ours = {**asdict(plan), "seeds": None}
    # a field the file lacks was added since, with a default that keeps the behaviour it was run with
    if (data.get("llm"), data.get("reflector")) != (model, reflector) or \
            {**ours, **data.get("plan", {}), "seeds": None} != ours:
        return {}
    return {s["seed"]: s for s in data.get("seeds", [])}


def main(quick: bool, seeds: str | None, model: str, reflector: str | None, held_out: int | None = None,
         out: str | None = None) -> None:
    """`dso bench learn --family drift --mixed` (its options parsed by `dsonet.bench.learn.cli`); ``held_out``:
    held-out items per fact, where more seeds of one plan replay the same answers."""
    if not OLD_PYTHON.exists():
        raise click.UsageError(f"{OLD_PYTHON} is missing: `make install` builds it from drift-old.lock")
    plan = QUICK if quick else FULL
    if seeds:
        plan = replace(plan, seeds=tuple(int(s) for s in seeds.split(",")))
    if held_out:
        plan = replace(plan, held_out_per_fact=held_out)
    log = lambda msg: click.echo(f"[{time.strftime('%H:%M:%S')}] {msg}")  # noqa: E731
    path = run(plan, quick, model, reflector, log, out or "learn-drift-mixed")
    click.echo(f"wrote {path}")
