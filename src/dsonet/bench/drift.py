"""`dso bench learn --family drift`: a fleet of coding agents learns its environment together.

The task family (`dsonet.learn.drift`): one line of Python against the releases installed in the
task environment (`drift.lock`), checked by running it in the sandbox. Each honest node practises
on its own facts only; the held-out instances cover every fact and the controls, so what the fleet
knows beyond one node is measured directly (fleet − own).

Per (agent model, learning seed), on real nodes (`dsonet.sim.nodes.InProcessFleet`, one shared log):

1. splits by instance, never repeated: per fact, training, validation and held-out instances; the
   facts are dealt out among the honest nodes (the seed rotates the deal); the last
   ``other_agents`` nodes run the other embedded model as their agent (the heterogeneous fleet);
2. learning: each node's agent makes G rollouts per training instance; the reflector (the 1.5B by
   default) sees each attempt's code with what running it showed and the reference code, and
   proposes ``candidates`` sampled lessons per mixed group; the gate keeps the best by execution
   on the validation instances nearest the lesson and a few others (`LearnConfig.gate_items`);
3. held-out answers under every condition, the same items and prompts but for the notes: none;
   own (each node's own library); neutral text of the own lessons' lengths; the hand-written
   reference lesson of the item's fact; the poison lesson of the item's fact alone (as a peer's
   note); fleet (after every honest node published and read the others'); cross-model (the
   fleet's lessons written from the other model's rollouts only); poisoned (after a Byzantine node
   published a plausible wrong lesson for every fact, honestly encoded and signed); and poisoned
   after feedback: every honest node's agent solves ``feedback_tasks`` training and validation
   instances with its library and reports each execution result as the outcome of the lessons it
   was given (`Node.record_outcome`, what `POST /outcomes` does), which moves their signers'
   reputation; a signer under the floor has its rows hidden. No node is told who is Byzantine.

Retrieval sees only the task text: every instance has one domain (``code.python``), so no label
of the fact or library reaches the search. Answers are greedy and cached (`CachedLLM`); a rerun
replays from the cache, so a run interrupted after hours restarts in minutes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from dsonet.aggregate import DeltaSoupConfig
from dsonet.bench.html_report import conditions_from_learn_row, write_html_report
from dsonet.bench.report import RESULTS_DIR, format_table, write_results
from dsonet.codec import make_batch
from dsonet.encoders.cache import cache_dir
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.learn import drift
from dsonet.learn.context import Retrieval, split_own
from dsonet.learn.control import neutral_notes
from dsonet.learn.evaluate import Run, answer, mcnemar, paired_bootstrap, wilson
from dsonet.learn.cache import CachedLLM
from dsonet.learn.code_lessons import refutes
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.llm import open_llm
from dsonet.learn.sandbox import Sandbox
from dsonet.learn.tasks import Task, TaskSet
from dsonet.library.policy import default_min_similarity
from dsonet.network.transport import MSG_ID, SENDER, subject_for
from dsonet.sim.nodes import InProcessFleet

OTHER = {"qwen2.5-coder-0.5b": "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}
REFLECTOR = "qwen2.5-coder-1.5b"  # every node's reflector by default: the 0.5B writes no usable lesson
DOMAIN = "code.python"  # one domain for every instance: retrieval never sees a fact's library
CONDITIONS = ("without", "own", "neutral", "reference", "poison_only", "fleet", "cross_model", "poisoned",
              "poisoned_after_feedback")
GITCHAMELEON = {"benchmark": "GitChameleon (version-conditioned Python problems, checked by execution)",
                "gpt-4o_pass@10": 0.399, "gpt-4o_pass@10_error_feedback": 0.437,
                "v2_enterprise_models": [0.48, 0.51]}


@dataclass(frozen=True)
class DriftPlan:
    agents: int = 3  # honest nodes whose agent is the evaluated model
    other_agents: int = 1  # honest nodes whose agent is the other embedded model (cross-model lessons)
    poisoners: int = 1
    facts: int = 0  # 0: every fact; N: the first N change facts and N // 3 controls (--quick)
    train_per_fact: int = 1  # one practice instance per fact: G rollouts + the reflection + the gate cost ~16 answers
    validation_per_fact: int = 1
    held_out_per_fact: int = 5  # change facts: 5 x 61 = 305 held-out items, the issue's >= 300
    held_out_per_control: int = 2
    feedback_tasks: int = 30  # per honest node, drawn from training and validation instances
    group_size: int = 4
    candidates: int = 1  # reflector proposals per group without a rule lesson (greedy); 2+ are sampled, the gate keeps the best
    gate_items: int = 2  # validation items nearest a lesson it is judged on (+ 1 other)
    answer_tokens: int = 48  # one line, fenced or not; longer replies are explanations the check ignores
    k: int = 3
    min_similarity: float | None = None  # None: the space's calibrated threshold
    seeds: tuple = (0,)

    @property
    def honest(self) -> int:
        return self.agents + self.other_agents


FULL = DriftPlan()
QUICK = DriftPlan(agents=2, other_agents=1, facts=6, train_per_fact=2, held_out_per_fact=2, feedback_tasks=8)


@dataclass
class Splits:
    train: list[list[Task]]  # per honest node: instances of its own facts
    validation: list[Task]
    held_out: list[Task]
    feedback: list[Task] = field(default_factory=list)  # training and validation instances, for outcomes


def facts_for(plan: DriftPlan) -> list:
    """The facts in play: all, or (``plan.facts``) that many changes and a third as many controls, dealt
    from the libraries in turn so that a small run still spans every library."""
    changes = _by_library_in_turn([f for f in drift.FACTS if not f.control])
    controls = _by_library_in_turn([f for f in drift.FACTS if f.control])
    if plan.facts:
        changes, controls = changes[:plan.facts], controls[:max(1, plan.facts // 3)]
    return changes + controls


def _by_library_in_turn(facts: list) -> list:
    """The facts reordered library by library in turn (numpy, scipy, ...), each library's in file order."""
    by_lib: dict[str, list] = {}
    for f in facts:
        by_lib.setdefault(f.library, []).append(f)
    queues = list(by_lib.values())
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def make_splits(plan: DriftPlan, seed: int) -> Splits:
    """Instances per fact cut into training / validation / held-out (the same for every learning seed);
    the facts dealt out among the honest nodes, rotated by ``seed``."""
    train: list[list[Task]] = [[] for _ in range(plan.honest)]
    validation, held_out = [], []
    for j, fact in enumerate(facts_for(plan)):
        held = plan.held_out_per_control if fact.change == "control" else plan.held_out_per_fact
        n_train, n_val = plan.train_per_fact, plan.validation_per_fact
        items = [replace(t, domain=DOMAIN) for t in drift.instances(fact, n_train + n_val + held, seed=0)]
        train[(j + seed) % plan.honest] += items[:n_train]
        validation += items[n_train:n_train + n_val]
        held_out += items[n_train + n_val:]
    pool = [t for part in train for t in part] + validation
    rng = np.random.default_rng(seed)
    feedback = [pool[i] for i in rng.permutation(len(pool))]
    return Splits(train, validation, held_out, feedback)


def fact_of(task: Task):
    return drift.FACTS_BY_ID[task.entry["fact"]]


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
        tasks = drift.drift_taskset(splits.validation + splits.held_out + [t for p in splits.train for t in p], sandbox)
        fleet = await InProcessFleet.start(plan.honest, workdir, agent.name)
        try:
            return await _scenario(fleet, tasks, splits, agent, other, reflector, plan, seed, workdir, log, t0)
        finally:
            await fleet.close()


def learn_config(plan: DriftPlan, retrieval: Retrieval, seed: int) -> LearnConfig:
    """How a node learns code: one epoch; every group reflected on, failed ones too (the error line
    explains them); the lesson the error line spells out, and the reflector's sampled candidates only
    where it spells out none; the gate on the validation items nearest each, keeping only what fixes
    something."""
    return LearnConfig(group_size=plan.group_size, max_tokens=plan.answer_tokens, epochs=1, batch_size=8,
                       max_lessons=1, candidates=plan.candidates, all_failed=True, rule_lessons=True, rule_first=True,
                       gate_items=plan.gate_items, gate_gain=1e-9, retrieval=retrieval, seed=seed)


async def _scenario(fleet, tasks: TaskSet, splits: Splits, agent, other, reflector, plan: DriftPlan, seed: int,
                    workdir: Path, log, t0: float) -> dict:
    llms = [agent] * plan.agents + [other] * plan.other_agents
    threshold = plan.min_similarity if plan.min_similarity is not None else default_min_similarity(fleet.encoder)
    retrieval = Retrieval(k=plan.k, min_similarity=threshold)
    learned = await learn_nodes(fleet, tasks, splits, llms, reflector, learn_config(plan, retrieval, seed), workdir, log)
    held = tasks.subset(splits.held_out, "drift:held-out")
    evaluate = lambda label, **kw: answer_all(agent, held, fleet, plan.agents, plan.answer_tokens, retrieval, label,  # noqa: E731
                                              log, **kw)
    runs = {"without": await evaluate("without", stores=False)}
    runs["own"] = await evaluate("own")
    own_words = [[len(h.experience.text.split()) for h in hits] for hits in runs["own"].hits]
    words = {t.id: w for t, w in zip(held.tasks, own_words)}
    runs["neutral"] = await evaluate("neutral", notes=lambda t: (neutral_notes(words[t.id]), []))
    runs["reference"] = await evaluate("reference", notes=lambda t: ([fact_of(t).lesson], []))
    runs["poison_only"] = await evaluate("poison_only", notes=lambda t: ([], [fact_of(t).poison] if fact_of(t).poison
                                                                        else []))
    await fleet.publish()
    await fleet.settle()
    others = set(fleet.node_ids[plan.agents:])
    runs["fleet"] = await evaluate("fleet")
    runs["cross_model"] = await evaluate("cross_model", exclude=lambda h: h.experience.provenance.node_id not in others)

    byz = [NodeIdentity.from_seed(f"drift-byzantine-{j}".encode()) for j in range(plan.poisoners)]
    poison_texts = await publish_poison(fleet, byz, facts_for(plan), agent.name)
    await fleet.settle()
    runs["poisoned"] = await evaluate("poisoned")
    outcomes = await feedback(fleet, tasks, splits, llms, plan, retrieval, log)
    runs["poisoned_after_feedback"] = await evaluate("poisoned_after_feedback")
    counted = hidden(await fleet.close(), {b.node_id for b in byz})
    log(f"    poison rows hidden (least of the honest nodes) {counted['poison_rows_hidden']:.2f}, "
        f"honest peers' rows hidden (most) {counted['honest_rows_hidden']:.2f}")
    return {
        "items": [{"id": t.id, "fact": t.entry["fact"], "library": fact_of(t).library,
                   "control": fact_of(t).change == "control"} for t in held.tasks],
        "correct": {c: r.correct.astype(int).tolist() for c, r in runs.items()},
        "injected": {c: r.injected.astype(int).tolist() for c, r in runs.items()},
        "facts": {"seed": seed, "learning": learned, "min_similarity": threshold, "poison": poison_texts,
                  "feedback": outcomes, **counted, "example": example(held, runs),
                  "lesson_tokens": lesson_tokens(runs["fleet"]),
                  "answer_tokens": {c: r.tokens for c, r in runs.items()},
                  "wall_s": round(time.perf_counter() - t0, 1)}}


async def learn_nodes(fleet, tasks: TaskSet, splits: Splits, llms: list, reflector, config: LearnConfig,
                      workdir: Path, log) -> list[dict]:
    """Honest node i's agent (``llms[i]``) learns on its own training instances into its node's library,
    with ``reflector`` writing the lessons and every node gating on the shared validation instances."""
    validation = tasks.subset(splits.validation, "drift:validation")
    learned = []
    for i, (store, node_id, llm) in enumerate(zip(fleet.stores, fleet.node_ids, llms)):
        learner = Learner(llm, store, config, workdir / f"node{i}.run", node_id, reflector, fleet.encoder)
        s = await asyncio.to_thread(learner.run, tasks.subset(splits.train[i], f"drift:node{i}"), False, validation)
        kept = [e.text for e in store.all()]
        learned.append({"node": i, "agent": llm.name, "rollouts": s.rollouts, "mean_reward": round(s.mean_reward, 4),
                        "mixed_groups": s.mixed_groups, "groups": s.groups, "proposals": s.proposals,
                        "gated_out": s.gated_out, "skipped": s.skipped, "lessons": kept, "tokens": s.tokens})
        log(f"    node{i} ({llm.name}): {s.rollouts} rollouts, mean reward {s.mean_reward:.2f}, mixed groups "
            f"{s.mixed_groups}/{s.groups}, proposals {s.proposals}, gated out {s.gated_out}, kept {len(kept)}")
    return learned


async def answer_all(llm, held: TaskSet, fleet, agents: int, max_tokens: int, retrieval: Retrieval, label: str, log,
                     stores: bool = True, notes=None, exclude=None) -> Run:
    """Held-out item i answered by honest node i mod ``agents`` from its library (or with fixed ``notes``)."""
    n = len(held.tasks)
    parts = []
    for k in range(agents):
        rows = list(range(k, n, agents))
        part = held.subset([held.tasks[i] for i in rows])
        store = fleet.stores[k] if stores and notes is None else None
        parts.append((rows, await asyncio.to_thread(answer, llm, part, store, retrieval, notes, max_tokens,
                                                    fleet.node_ids[k], None, False, exclude)))
    correct, parsed, injected = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
    texts, hits, tokens, wall = [""] * n, [[] for _ in range(n)], 0, 0.0
    for rows, run in parts:
        correct[rows], parsed[rows], injected[rows] = run.correct, run.parsed, run.injected
        for i, text, h in zip(rows, run.texts, run.hits):
            texts[i], hits[i] = text, h
        tokens, wall = tokens + run.tokens, wall + run.wall_s
    out = Run(correct, parsed, injected, texts, hits, tokens, wall)
    log(f"    {label}: {out.accuracy:.3f} (coverage {out.coverage:.2f})")
    return out


async def publish_poison(fleet, byz: list[NodeIdentity], facts: list, model: str) -> list[str]:
    """Each Byzantine node signs and publishes its share of the facts' wrong lessons, honestly encoded."""
    texts = sorted({f.poison for f in facts if f.poison})
    vectors = fleet.encoder.encode(texts, kind="document")
    now = int(time.time() * 1000)
    for j, ident in enumerate(byz):
        rows = list(range(j, len(texts), len(byz)))
        exps = [Experience(texts[r], DOMAIN, 0.9, Provenance(ident.node_id, model, now, 0)) for r in rows]
        payload = make_batch(exps, vectors[rows], fleet.profile, ident, timestamp_ms=now).to_msgpack()
        await fleet.attacker.publish(payload, subject_for("dso", "batch", DOMAIN),
                                     {SENDER: ident.node_id, MSG_ID: f"byz{j}-poison-{now}"})
    return texts


async def feedback(fleet, tasks: TaskSet, splits: Splits, llms, plan: DriftPlan, retrieval: Retrieval, log) -> dict:
    """Every honest node's agent solves feedback tasks through its node's agent API, as a careful user's
    agent would: `recall` (lessons and a retrieval id), answer and run; then answer again without each
    lesson in turn, and report per lesson what its absence changed (`POST /outcomes` with ``lessons``):
    helped where the task passed only with it, harmed where it passed only without it or where the
    attempt wrote what the lesson advised and the environment refused it (`code_lessons.refutes`: the
    0.5B often fails without the lesson too, so leave-one-out alone rarely convicts a poison), nothing
    where it made no difference. Outcomes move the lessons' signers' reputation (``by_signer``: per node, each
    peer signer's [helped, harmed] outcomes). (Crediting every lesson of a retrieval with its task's
    result cannot tell a wrong lesson from the right one beside it.)"""
    passed, reported, harmed, by_signer = [], [], 0, []
    for i, (node_id, llm) in enumerate(zip(fleet.node_ids, llms)):
        judged: dict[str, list[int]] = {}  # peer signer -> [helped, harmed] outcomes this node's agent reported
        start = i * plan.feedback_tasks % len(splits.feedback)
        part = tasks.subset((splits.feedback * 2)[start:start + plan.feedback_tasks])
        recalled = {t.id: await fleet.recall(i, t.question, retrieval.k, retrieval.min_similarity) for t in part.tasks}
        notes = lambda t: split_own(recalled[t.id][1], node_id)  # noqa: E731
        run = await asyncio.to_thread(answer, llm, part, None, retrieval, notes, plan.answer_tokens)
        out = [(t, j) for t in part.tasks for j in range(len(recalled[t.id][1]))]
        variants = [replace(t, id=f"{t.id}~{j}") for t, j in out]
        left = {v.id: split_own([h for k, h in enumerate(recalled[t.id][1]) if k != j], node_id)
                for v, (t, j) in zip(variants, out)}
        loo = await asyncio.to_thread(answer, llm, tasks.subset(variants), None, retrieval, lambda v: left[v.id],
                                      plan.answer_tokens)
        without = {(t.id, j): ok for (t, j), ok in zip(out, loo.correct)}
        n = 0
        for task, ok, reply in zip(part.tasks, run.correct, run.texts):
            rid, hits = recalled[task.id]
            error = "" if ok else part.explain(task, reply)
            verdicts = {h.experience.id: bool(ok) for j, h in enumerate(hits)
                        if bool(ok) != bool(without[task.id, j]) or refutes(error, reply, h.experience.text)}
            if verdicts:
                n += await fleet.outcome(i, rid, lessons=verdicts)
                harmed += sum(not v for v in verdicts.values())
                for h in hits:
                    for signer in set(h.sources) - {node_id} if h.experience.id in verdicts else ():
                        judged.setdefault(signer, [0, 0])[not verdicts[h.experience.id]] += 1
        passed.append(round(run.accuracy, 4))
        reported.append(n)
        by_signer.append(judged)
    log(f"    feedback phase: {plan.feedback_tasks} tasks a node, passed {passed}, lesson outcomes reported {reported} "
        f"({harmed} harmed)")
    return {"tasks_per_node": plan.feedback_tasks, "passed": passed, "outcomes_reported": reported, "harmed": harmed,
            "by_signer": by_signer}


def hidden(states: list, byzantine: set[str], floor: float = DeltaSoupConfig().rep_floor) -> dict:
    """Per honest node (its final `NodeState`), the share of the poison's rows and of honest peers' rows
    hidden because their signer's reputation fell under the floor: the poison's least over the nodes,
    honest rows' most. An evicted row counts as hidden."""
    poison, honest, dropped = [], [], []
    for state in states:
        rep = {p["node_id"]: p["reputation"] for p in state.peers}
        held = [e for e in state.experiences if e.provenance.node_id != state.node_id]
        bad = [e for e in held if e.provenance.node_id in byzantine]
        good = [e for e in held if e.provenance.node_id not in byzantine]
        down = lambda e: rep.get(e.provenance.node_id, 1.0) < floor  # noqa: E731
        poison.append(sum(map(down, bad)) / len(bad) if bad else 1.0)
        honest.append(sum(map(down, good)) / len(good) if good else 0.0)
        dropped.append({"node": state.node_id[:8], "poison_rows": len(bad), "poison_hidden": sum(map(down, bad)),
                        "signers_under_floor": sorted(s[:8] for s, r in rep.items() if r < floor)})
    return {"poison_rows_hidden": round(min(poison), 4), "honest_rows_hidden": round(max(honest), 4),
            "poison_rows_hidden_per_node": [round(p, 4) for p in poison],
            "honest_rows_hidden_per_node": [round(h, 4) for h in honest], "dropped": dropped}


def lesson_tokens(run: Run) -> float:
    """Mean prompt tokens the injected lessons cost per prompt that received any (words x 4/3)."""
    used = [sum(len(h.experience.text.split()) for h in hits) * 4 / 3 for hits in run.hits if hits]
    return round(float(np.mean(used)), 1) if used else 0.0


def example(held: TaskSet, runs: dict) -> dict | None:
    """One held-out task that failed without lessons and passed with the fleet's, with both replies."""
    for i, task in enumerate(held.tasks):
        if runs["without"].correct[i] < 1 and runs["fleet"].correct[i] >= 1 and runs["fleet"].hits[i]:
            return {"task": task.question, "fact": task.entry["fact"],
                    "without": runs["without"].texts[i], "without_feedback": held.explain(task, runs["without"].texts[i]),
                    "fleet": runs["fleet"].texts[i],
                    "lessons": [{"text": h.experience.text, "author": h.experience.provenance.node_id[:8]}
                                for h in runs["fleet"].hits[i]]}
    return None


# -- statistics over seeds --------------------------------------------------------------------------

def _pairs(a: np.ndarray, b: np.ndarray) -> list[float]:
    lo, hi = paired_bootstrap(a, b)
    return [round(lo, 4), round(hi, 4)]


def summarise(llm_name: str, per_seed: list[dict]) -> dict:
    """One bench row pooled over seeds (each seed's items as pairs): accuracies on the change facts,
    intervals, the controls, per library, poison hidden, what the fleet recovered of the reference."""
    items = [it for s in per_seed for it in s["items"]]
    cat = {c: np.concatenate([np.array(s["correct"][c], float) for s in per_seed]) for c in CONDITIONS}
    control = np.array([it["control"] for it in items], bool)
    change = ~control
    acc = {c: round(float(v[change].mean()), 4) for c, v in cat.items()}
    n = int(change.sum())
    name = lambda c: "with" if c == "own" else c  # noqa: E731  (the rows' existing name for own lessons)
    row = {"llm": llm_name, "task": "drift", "n_eval": n, "n_control": int(control.sum()), "seeds": len(per_seed)}
    row.update({f"accuracy_{name(c)}": acc[c] for c in CONDITIONS})
    row["wilson"] = {c: [round(x, 4) for x in wilson(float(cat[c][change].sum()), n)] for c in CONDITIONS}
    for c in CONDITIONS[1:]:
        row[f"ci95_{name(c)}"] = _pairs(cat[c][change], cat["without"][change])
    row["p_mcnemar"] = {c: round(mcnemar(cat[c][change], cat["without"][change]), 4) for c in CONDITIONS[1:]}
    row["ci95_fleet_vs_own"] = _pairs(cat["fleet"][change], cat["own"][change])
    row["ci95_with_vs_neutral"] = _pairs(cat["own"][change], cat["neutral"][change])
    row["ci95_after_feedback_vs_fleet"] = _pairs(cat["poisoned_after_feedback"][change], cat["fleet"][change])
    if control.any():
        row["accuracy_control_without"] = round(float(cat["without"][control].mean()), 4)
        row["accuracy_control_fleet"] = round(float(cat["fleet"][control].mean()), 4)
        row["ci95_control"] = _pairs(cat["fleet"][control], cat["without"][control])
    libs = np.array([it["library"] for it in items])
    row["by_library"] = {lib: {"n_eval": int((m := change & (libs == lib)).sum()),
                               "accuracy_without": round(float(cat["without"][m].mean()), 4),
                               "accuracy_fleet": round(float(cat["fleet"][m].mean()), 4),
                               "ci95_fleet": _pairs(cat["fleet"][m], cat["without"][m])}
                         for lib in sorted(set(libs[change]))}
    row["coverage"] = {c: round(float(np.concatenate([s["injected"][c] for s in per_seed]).mean()), 4)
                       for c in ("own", "fleet", "cross_model", "poisoned", "poisoned_after_feedback")}
    row["poison_rows_hidden"] = min(s["facts"]["poison_rows_hidden"] for s in per_seed)
    row["honest_rows_hidden"] = max(s["facts"]["honest_rows_hidden"] for s in per_seed)
    gap = acc["reference"] - acc["without"]
    row["recovered"] = round((acc["fleet"] - acc["without"]) / gap, 4) if gap > 0 else None
    row["lesson_prompt_tokens"] = round(float(np.mean([s["facts"]["lesson_tokens"] for s in per_seed])), 1)
    row["per_fact"] = _per_fact([it["fact"] for it in items], cat)
    row["per_seed"] = [s["facts"] | {"accuracy": {c: round(float(np.mean(s["correct"][c])), 4) for c in CONDITIONS}}
                       for s in per_seed]
    row["wall_s"] = round(sum(s["facts"]["wall_s"] for s in per_seed), 1)
    return row


def _per_fact(facts: list[str], cat: dict) -> dict:
    """Every fact's held-out accuracy per condition (none dropped)."""
    ids = np.array(facts)
    return {f: {"n": int((m := ids == f).sum()), **{c: round(float(cat[c][m].mean()), 4) for c in CONDITIONS}}
            for f in dict.fromkeys(ids)}



# -- running and combining ---------------------------------------------------------------------------

def seed_name(model: str, seed: int) -> str:
    return f"learn-drift-{model.replace('/', '_')}-seed{seed}"


def run(model: str, plan: DriftPlan, quick: bool = False, reflector: str | None = None, log=print) -> list[Path]:
    """Each learning seed of ``plan`` with ``model`` as the evaluated agent: one result file per seed
    (bench/results/learn-drift-<model>-seed<s>.json), so a long run goes in chunks, pooled by `combine`."""
    if model not in OTHER:
        raise ValueError(f"model: {model!r}; the drift fleet mixes the embedded models, choose one of {sorted(OTHER)}")
    cache = cache_dir() / "bench-learn" / ("drift-answers-quick.sqlite" if quick else "drift-answers.sqlite")
    agent, other = CachedLLM(open_llm(None, model), cache), CachedLLM(open_llm(None, OTHER[model]), cache)
    teacher = CachedLLM(open_llm(None, reflector or REFLECTOR), cache)
    root = cache_dir() / "bench-learn" / ("drift-quick" if quick else "drift") / model
    paths = []
    for seed in plan.seeds:
        hits, misses = agent.hits + other.hits + teacher.hits, agent.misses + other.misses + teacher.misses
        data = asyncio.run(run_seed(agent, other, teacher, plan, seed, root, log))
        data["facts"]["answers"] = {"generated": agent.misses + other.misses + teacher.misses - misses,
                                    "from_cache": agent.hits + other.hits + teacher.hits - hits}
        paths.append(write_results(seed_name(model, seed), {"llm": model, "other_agent": other.name,
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
               label=f"{row['llm']} (n={row['n_eval']}x{row['seeds']})")
    ax.set_xticks(np.arange(len(CONDITIONS)), [c.replace("_", " ") for c in CONDITIONS], fontsize=7, rotation=20)
    ax.set_ylabel("held-out accuracy (Wilson 95%)")
    ax.set_title("drift: one line against the installed libraries, checked by execution", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def seed_files(model: str | None = None, quick: bool = False) -> list[Path]:
    """The per-seed result files written so far (of one model, or all)."""
    stem = seed_name(model, 0).removesuffix("-seed0") if model else "learn-drift-"
    return sorted(p for p in RESULTS_DIR.glob(f"{stem}*-seed*{'-quick' if quick else ''}.json")
                  if quick == p.stem.endswith("-quick"))
