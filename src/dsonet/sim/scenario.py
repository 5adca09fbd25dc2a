"""The scenario layer: a fleet of coding agents learns library drift together, step by step.

`dso bench learn --family drift` (`dsonet.bench.drift`) and `dso demo` (`dsonet.demo.run`) are two
configurations of one scenario: the same fleet (`dsonet.sim.nodes`: in-process nodes, or node
processes on NATS, behind one protocol), the same attack plans (`dsonet.sim.adversary`) and the
same records (`dsonet.sim.report`). They differ in sizes (`DriftPlan`), in the conditions they
measure after each step, and in what they print.

The task family (`dsonet.learn.drift`): one line of Python against the releases installed in the
task environment, checked by running it in the sandbox. The steps, in the order both run them:

1. `make_splits`: instances per fact cut into training, validation and held-out, never repeated;
   the facts dealt out among the honest nodes (the seed rotates the deal), so each practises on its
   own facts and the held-out instances cover every fact and the controls (training instances that
   no node learns from, ``practice_per_fact``, only widen the feedback phase's pool);
2. `Scenario.learn`: each honest node's agent makes G rollouts per training instance, the reflector
   proposes lessons from what running them showed, the execution gate keeps what fixes something;
3. `Scenario.answer`: held-out answers under a condition, item i always answered by honest node
   i mod ``plan.agents``, from its library or with fixed notes;
4. `Scenario.share`: every honest node publishes what it holds and reads the others';
5. the attack plans strike the log (`dsonet.sim.adversary`), and `Scenario.poison`: the Byzantine
   nodes publish a plausible wrong lesson for every fact, honestly encoded and signed;
6. `Scenario.feedback`: every honest node's agent solves practice tasks with the lessons its node
   recalls and reports each lesson's outcome, which moves its signer's reputation;
7. `Scenario.close`: what each honest node holds at the end (`NodeState`).

Retrieval sees only the task text: every instance has one domain (`DOMAIN`), so no label of the
fact or library reaches the search.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import AsyncIterator, Callable

import numpy as np

from dsonet.aggregate import DeltaSoupConfig, Reputation
from dsonet.learn import drift
from dsonet.learn.code_lessons import refutes
from dsonet.learn.context import Retrieval, split_own
from dsonet.learn.control import neutral_notes
from dsonet.learn.evaluate import Run, answer
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.sandbox import Sandbox
from dsonet.learn.tasks import Task, TaskSet
from dsonet.library import Hit
from dsonet.scope import Probe, Scope
from dsonet.sim import adversary
from dsonet.sim.attacks import SimNode
from dsonet.sim.nats_nodes import NatsFleet
from dsonet.sim.nodes import Fleet, InProcessFleet, NodeState

OTHER = {"qwen2.5-coder-0.5b": "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}
REFLECTOR = "qwen2.5-coder-1.5b"  # every node's reflector by default: the 0.5B writes no usable lesson
DOMAIN = "code.python"  # one domain for every instance: retrieval never sees a fact's library
Log = Callable[[str], None]


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
    # per honest node, drawn from training and validation instances; 30 convicted the poisoner on 7 of 8
    # node-seeds (the eighth: 6 harmful outcomes, 2 helpful, p = 0.14)
    feedback_tasks: int = 60
    # training instances per fact used only as feedback tasks (never learned from): drawn after the held-out
    # ones, so adding them leaves every held-out instance as it was
    practice_per_fact: int = 0
    group_size: int = 4
    candidates: int = 1  # reflector proposals per group without a rule lesson (greedy); 2+ are sampled, the gate
    # keeps the best
    gate_items: int = 2  # validation items nearest a lesson it is judged on (+ 1 other)
    probation: bool = False  # a lesson that ties at the gate goes in on probation, for outcomes to settle
    answer_tokens: int = 48  # one line, fenced or not; longer replies are explanations the check ignores
    k: int = 3
    min_similarity: float | None = None  # None: the space's calibrated threshold
    seeds: tuple = (0,)

    @property
    def honest(self) -> int:
        return self.agents + self.other_agents


@dataclass
class Splits:
    train: list[list[Task]]  # per honest node: instances of its own facts
    validation: list[Task]
    held_out: list[Task]
    feedback: list[Task] = field(default_factory=list)  # training and validation instances, for outcomes
    practice: list[Task] = field(default_factory=list)  # the training instances no node learns from (in feedback)


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
    the facts dealt out among the honest nodes, rotated by ``seed``; the feedback tasks shuffled from
    the training (practice instances included) and validation instances."""
    train: list[list[Task]] = [[] for _ in range(plan.honest)]
    validation, held_out, practice = [], [], []
    for j, fact in enumerate(facts_for(plan)):
        held = plan.held_out_per_control if fact.change == "control" else plan.held_out_per_fact
        n_train, n_val = plan.train_per_fact, plan.validation_per_fact
        items = [replace(t, domain=DOMAIN)
                 for t in drift.instances(fact, n_train + n_val + held + plan.practice_per_fact, seed=0)]
        train[(j + seed) % plan.honest] += items[:n_train]
        validation += items[n_train:n_train + n_val]
        held_out += items[n_train + n_val:n_train + n_val + held]
        practice += items[n_train + n_val + held:]
    pool = [t for part in train for t in part] + validation + practice
    rng = np.random.default_rng(seed)
    feedback = [pool[i] for i in rng.permutation(len(pool))]
    return Splits(train, validation, held_out, feedback, practice)


def fact_of(task: Task):
    return drift.FACTS_BY_ID[task.entry["fact"]]


def taskset(splits: Splits, sandbox: Sandbox) -> TaskSet:
    """Every instance of the splits, checked by running answers in ``sandbox``."""
    return drift.drift_taskset(splits.validation + splits.held_out + [t for p in splits.train for t in p]
                               + splits.practice, sandbox)


def learn_config(plan: DriftPlan, retrieval: Retrieval, seed: int) -> LearnConfig:
    """How a node learns code: one epoch; every group reflected on, failed ones too (the error line
    explains them); the lesson the error line spells out, or where it names nothing the reference, and
    the reflector's sampled candidates only where neither gives one; the gate on the validation items
    nearest each, keeping only what fixes something (an error line's lesson whose swap fixed its own
    attempt: what does no harm)."""
    return LearnConfig(group_size=plan.group_size, max_tokens=plan.answer_tokens, epochs=1, batch_size=8,
                       max_lessons=1, candidates=plan.candidates, all_failed=True, rule_lessons=True, rule_first=True,
                       repair_check=True, gate_items=plan.gate_items, gate_gain=1e-9, probation=plan.probation,
                       retrieval=retrieval, seed=seed)


@asynccontextmanager
async def running(nats: bool, honest: int, workdir: Path, model: str = "") -> AsyncIterator[Fleet]:
    """A started fleet that is closed on the way out, whatever happened (closing twice is harmless)."""
    fleet = await (NatsFleet if nats else InProcessFleet).start(honest, workdir, model)
    try:
        yield fleet
    finally:
        await fleet.close()


# Fixed notes for the conditions that answer without a library: the fact's hand-written lesson, and
# its poison lesson as a peer's note.
def reference_notes(task: Task) -> tuple[list[str], list[str]]:
    return [fact_of(task).lesson], []


def poison_notes(task: Task) -> tuple[list[str], list[str]]:
    return [], [fact_of(task).poison] if fact_of(task).poison else []


class Scenario:
    """One run of the scenario on a started fleet: honest node i's agent is ``llms[i]``; the first
    ``plan.agents`` of them run the evaluated model, which answers every held-out condition.

    A fleet of different machines (`dsonet.bench.drift_mixed`): ``node_tasks[i]``, the tasks as honest
    node i's environment checks them (``tasks`` for every node by default), and ``probes[i]``, what that
    environment has: node i's lessons are scoped to it and its searches carry it (None: today's
    unscoped lessons and searches)."""

    def __init__(self, fleet: Fleet, tasks: TaskSet, splits: Splits, plan: DriftPlan, llms: list, reflector,
                 retrieval: Retrieval, workdir: Path, log: Log = print, node_tasks: list[TaskSet] | None = None,
                 probes: list[Probe | None] | None = None):
        self.fleet, self.tasks, self.splits, self.plan = fleet, tasks, splits, plan
        self.llms, self.reflector, self.retrieval, self.workdir, self.log = llms, reflector, retrieval, workdir, log
        self.held = tasks.subset(splits.held_out, "drift:held-out")
        self.node_tasks = node_tasks or [tasks] * len(llms)
        self.probes = probes or [None] * len(llms)

    def environment(self, i: int) -> Scope | None:
        """Honest node i's environment as its searches state it (None: they state none)."""
        probe = self.probes[i]
        return None if probe is None else probe.environment

    async def learn(self, config: LearnConfig) -> list[dict]:
        """Honest node i's agent learns on its own training instances into its node's library, with the
        reflector writing the lessons and every node gating on the shared validation instances."""
        fleet, splits = self.fleet, self.splits
        learned = []
        for i, (store, node_id, llm) in enumerate(zip(fleet.stores, fleet.node_ids, self.llms)):
            tasks = self.node_tasks[i]
            validation = tasks.subset(splits.validation, "drift:validation")
            learner = Learner(llm, store, config, self.workdir / f"node{i}.run", node_id, self.reflector, fleet.encoder,
                              self.probes[i])
            s = await asyncio.to_thread(learner.run, tasks.subset(splits.train[i], f"drift:node{i}"), False, validation)
            kept = [e.text for e in store.all()]
            learned.append({"node": i, "agent": llm.name, "rollouts": s.rollouts,
                            "mean_reward": round(s.mean_reward, 4), "mixed_groups": s.mixed_groups, "groups": s.groups,
                            "proposals": s.proposals, "gated_out": s.gated_out, "skipped": s.skipped,
                            "lessons": kept, "tokens": s.tokens})
            self.log(f"    node{i} ({llm.name}): {s.rollouts} rollouts, mean reward {s.mean_reward:.2f}, mixed groups "
                     f"{s.mixed_groups}/{s.groups}, proposals {s.proposals}, gated out {s.gated_out}, kept {len(kept)}")
        return learned

    async def answer(self, label: str, items: TaskSet | None = None, stores: bool = True, notes=None,
                     exclude: Callable[[Hit], bool] | None = None, nodes: list[int] | None = None) -> Run:
        """Held-out item i (of ``items``, every held-out instance by default) answered by the i mod n-th
        of the n honest ``nodes`` (the first ``plan.agents`` by default) from its library, or with fixed
        ``notes`` (or none: ``stores=False``); each node searches in its environment (`environment`)."""
        held, fleet = self.held if items is None else items, self.fleet
        nodes = list(range(self.plan.agents)) if nodes is None else nodes
        n = len(held.tasks)
        parts = []
        for j, k in enumerate(nodes):
            rows = list(range(j, n, len(nodes)))
            part = held.subset([held.tasks[i] for i in rows])
            store = fleet.stores[k] if stores and notes is None else None
            parts.append((rows, await asyncio.to_thread(answer, self.llms[0], part, store, self.retrieval, notes,
                                                        self.plan.answer_tokens, fleet.node_ids[k], None, False,
                                                        exclude, self.environment(k))))
        correct, parsed, injected = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        texts, hits, tokens, wall = [""] * n, [[] for _ in range(n)], 0, 0.0
        for rows, run in parts:
            correct[rows], parsed[rows], injected[rows] = run.correct, run.parsed, run.injected
            for i, text, h in zip(rows, run.texts, run.hits):
                texts[i], hits[i] = text, h
            tokens, wall = tokens + run.tokens, wall + run.wall_s
        out = Run(correct, parsed, injected, texts, hits, tokens, wall)
        self.log(f"    {label}: {out.accuracy:.3f} (coverage {out.coverage:.2f})")
        return out

    def neutral_notes(self, own: Run) -> Callable[[Task], tuple[list[str], list[str]]]:
        """Neutral text of the lengths of the lessons each held-out item received in ``own``."""
        words = {t.id: [len(h.experience.text.split()) for h in hits] for t, hits in zip(self.held.tasks, own.hits)}
        return lambda t: (neutral_notes(words[t.id]), [])

    def from_nodes(self, node_ids: set[str]) -> Callable[[Hit], bool]:
        """An ``exclude`` for `answer` keeping only the lessons these nodes wrote."""
        return lambda h: h.experience.provenance.node_id not in node_ids

    async def share(self) -> None:
        """Every honest node publishes what it holds; returns once every node has read the log."""
        await self.fleet.publish()
        await self.fleet.settle()

    async def poison(self, byz: list[SimNode]) -> list[str]:
        """The Byzantine nodes publish the poison of every fact in play; returns once every node read it."""
        texts = await adversary.publish_poison(self.fleet, byz, facts_for(self.plan), self.llms[0].name, DOMAIN)
        await self.fleet.settle()
        return texts

    async def feedback(self) -> dict:
        """Every honest node's agent solves feedback tasks through its node's agent API, as a careful
        user's agent would: `recall` (lessons and a retrieval id), answer and run; then answer again
        without each lesson in turn (but one the failed attempt followed into a refusal), and report per
        lesson what its absence changed (`POST /outcomes` with ``lessons``): helped where the task passed
        only with it, harmed where it passed only without it or where the attempt wrote what the lesson
        advised and the environment refused it (`code_lessons.refutes`: the 0.5B often fails without the
        lesson too, so leave-one-out alone rarely convicts a poison), nothing where it made no difference.
        Outcomes move the lessons' signers' reputation (``by_signer``: per node, each peer signer's
        [helped, harmed] outcomes; ``convicted_after``: per node, after how many tasks its outcomes
        convicted each signer they convict, by the reputation model's sign test). (Crediting every lesson
        of a retrieval with its task's result cannot tell a wrong lesson from the right one beside it.)"""
        fleet, splits, plan, retrieval = self.fleet, self.splits, self.plan, self.retrieval
        passed, reported, harmed, by_signer, convicted_after = [], [], 0, [], []
        for i, (node_id, llm) in enumerate(zip(fleet.node_ids, self.llms)):
            tasks, environment = self.node_tasks[i], self.environment(i)
            judged: dict[str, list[int]] = {}  # peer signer -> [helped, harmed] outcomes this node's agent reported
            mirror, convicted = Reputation(conviction_p=DeltaSoupConfig().conviction_p), {}
            start = i * plan.feedback_tasks % len(splits.feedback)
            part = tasks.subset((splits.feedback * 2)[start:start + plan.feedback_tasks])
            recalled = {t.id: await fleet.recall(i, t.question, retrieval.k, retrieval.min_similarity, environment)
                        for t in part.tasks}
            notes = lambda t: split_own(recalled[t.id], node_id)  # noqa: E731
            run = await asyncio.to_thread(answer, llm, part, None, retrieval, notes, plan.answer_tokens)
            # a lesson the failed attempt followed into a refusal harmed whatever its absence would change:
            # no answer without it is needed
            failed = [(t, part.explain(t, reply), reply) for t, ok, reply in zip(part.tasks, run.correct, run.texts)
                      if not ok]
            refuted = {(t.id, j) for t, error, reply in failed for j, h in enumerate(recalled[t.id])
                       if refutes(error, reply, h.experience.text)}
            out = [(t, j) for t in part.tasks for j in range(len(recalled[t.id])) if (t.id, j) not in refuted]
            variants = [replace(t, id=f"{t.id}~{j}") for t, j in out]
            left = {v.id: split_own([h for k, h in enumerate(recalled[t.id]) if k != j], node_id)
                    for v, (t, j) in zip(variants, out)}
            loo = await asyncio.to_thread(answer, llm, tasks.subset(variants), None, retrieval, lambda v: left[v.id],
                                          plan.answer_tokens)
            without = {(t.id, j): ok for (t, j), ok in zip(out, loo.correct)}
            n = 0
            for number, (task, ok) in enumerate(zip(part.tasks, run.correct), 1):
                hits = recalled[task.id]
                verdicts = {h.experience.id: bool(ok) for j, h in enumerate(hits)
                            if (task.id, j) in refuted or bool(ok) != bool(without[task.id, j])}
                if verdicts:
                    n += await fleet.outcome(i, hits.retrieval_id, lessons=verdicts)
                    harmed += sum(not v for v in verdicts.values())
                    for h in hits:
                        # the signers the node holds to account (harm outside a lesson's scope convicts none)
                        signers = h.sources if environment is None else fleet.stores[i].accountable(h, environment)
                        for signer in set(signers) - {node_id} if h.experience.id in verdicts else ():
                            judged.setdefault(signer, [0, 0])[not verdicts[h.experience.id]] += 1
                            mirror.outcome(signer, verdicts[h.experience.id])
                convicted |= {signer: number for signer in judged if signer not in convicted and mirror.convicted(signer)}
            passed.append(round(run.accuracy, 4))
            reported.append(n)
            by_signer.append(judged)
            convicted_after.append(convicted)
        self.log(f"    feedback phase: {plan.feedback_tasks} tasks a node, passed {passed}, lesson outcomes reported "
                 f"{reported} ({harmed} harmed)")
        return {"tasks_per_node": plan.feedback_tasks, "passed": passed, "outcomes_reported": reported,
                "harmed": harmed, "by_signer": by_signer, "convicted_after": convicted_after}

    async def close(self) -> list[NodeState]:
        """Stop every node; what each honest node holds (a second call returns the same)."""
        return await self.fleet.close()
