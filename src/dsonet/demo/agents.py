"""The agents' side of the demo, and every call it makes into `dsonet.learn`: the LLM and the
tasks, learning (training-free GRPO) and answering held-out tasks with the lessons a store gives.

Learning, one epoch: every honest node learns from its own slice of the training tasks, G
rollouts per task at T = 0.7, then the semantic advantage -> "When X, do Y" -> ADD / UPDATE /
DELETE / NONE against its own store. The rollouts of all nodes go to the LLM together, in steps
of `STEP` sequences so that progress shows (a batching back end loses nothing by it): every
library is empty before this single epoch, so the rollouts carry no lessons whichever node they
belong to. The advantage and the library update run per node (`Learner.learn_groups`), so each
lesson lands in the store of the node whose rollouts taught it.

Answering: held-out task i is answered by honest node i mod H with `dsonet.learn.evaluate.answer`
(greedy, one sample, the lessons its store retrieves in the system message, its own apart from
its peers'), one call per node so that progress shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dsonet.errors import DsoError
from dsonet.learn import evaluate
from dsonet.learn.context import MIN_SIMILARITY, Retrieval, best_scores, measured_threshold, messages, split_own
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.llm import ChatLLM, Message, open_llm
from dsonet.learn.tasks import FAMILIES, Task, TaskSet, family_tasks, load_tasks

Echo = Callable[[str], None]
STEP = 32  # rollouts per LLM call: SmolLM2's batch (the transformers back end batches; llama.cpp does not)


@dataclass(frozen=True)
class Workload:
    llm: ChatLLM
    tasks: TaskSet  # every task used: the task set's prompt and verifier
    train: list[TaskSet]  # honest node i's own training tasks
    validation: TaskSet  # training items held apart: the gate on new lessons and the measured threshold
    held_out: TaskSet  # no question of it is in any training slice or in validation


@dataclass(frozen=True)
class NodeLearning:
    kept: list[str]  # the lessons it added or rewrote
    rewards: list[float]  # of its rollouts
    groups: int  # one per training task
    mixed_groups: int
    proposals: int
    skipped: int  # LLM outputs that were not a usable lesson or operation
    gated_out: int  # candidates that lowered accuracy on the validation slice


@dataclass(frozen=True)
class Learned:
    nodes: list[NodeLearning]
    tokens: int  # prompt and generated, all LLM calls of the step


@dataclass(frozen=True)
class Answers:
    correct: np.ndarray  # (n,) 1.0 where the answer was right
    parsed: np.ndarray  # (n,) False where the reply stated no answer of the task's kind
    lessons: list[list]  # the hits injected into each prompt (empty: none passed the threshold)
    chats: list[list[Message]]  # what the LLM was sent
    responses: list[str]
    tokens: int


class Progress:
    """One line after each step of a long LLM job: done / total, generated tokens/s, elapsed, ETA."""

    def __init__(self, echo: Echo, what: str, total: int):
        self.echo, self.what, self.total = echo, what, total
        self.done = self.tokens = 0
        self.t0 = time.perf_counter()

    def step(self, done: int, generated: int | None = None) -> None:
        """``generated``: tokens generated in the step, when the back end reports them apart from the prompt's."""
        self.done += done
        elapsed = time.perf_counter() - self.t0
        speed = ""
        if generated is not None:
            self.tokens += generated
            speed = f", {self.tokens / max(elapsed, 1e-9):.1f} tokens/s generated"
        eta = f", ETA {elapsed / self.done * (self.total - self.done):.0f} s" if 0 < self.done < self.total else ""
        self.echo(f"      {self.what} {self.done}/{self.total}{speed}, {elapsed:.0f} s{eta}")


def load(task: str, train_slices: int, train_per_slice: int, eval_tasks: int, seed: int, llm_url: str | None,
         llm_model: str | None, validation: int = 0) -> Workload:
    """The LLM, ``train_slices`` slices of training tasks, a validation slice and the held-out tasks
    (see `split_tasks`)."""
    llm = open_llm(llm_url, llm_model)
    return Workload(llm, *split_tasks(task, train_slices, train_per_slice, eval_tasks, seed, validation))


def split_tasks(task: str, train_slices: int, train_per_slice: int, eval_tasks: int, seed: int,
                validation: int = 0) -> tuple[TaskSet, list[TaskSet], TaskSet, TaskSet]:
    """(all the tasks, the training slices, the validation slice, the held-out tasks): no question
    appears twice."""
    n_train = train_slices * train_per_slice
    need = n_train + validation + eval_tasks
    # reasoning-gym repeats small items, so draw more and keep the first of each question. A family of
    # `dso bench learn` comes with its generator settings and its answer-only prompt.
    family = task.removeprefix("rg:")
    pool = family_tasks(family, 2 * need + 50, seed) if family in FAMILIES else load_tasks(task, 2 * need + 50, seed)
    tasks = _distinct(pool.tasks)[:need]
    if len(tasks) < need:
        raise DsoError(f"task: {task} gives {len(tasks)} distinct tasks, but {need} are needed "
                       f"({train_slices} nodes × {train_per_slice} to train on, {validation} to validate, "
                       f"{eval_tasks} held out); lower --train-per-node, --validation-tasks or --eval-tasks")
    slices = [tasks[i * train_per_slice:(i + 1) * train_per_slice] for i in range(train_slices)]
    return (pool.subset(tasks), [pool.subset(s) for s in slices], pool.subset(tasks[n_train:n_train + validation]),
            pool.subset(tasks[-eval_tasks:]))


def learn(work: Workload, stores: Sequence, node_ids: Sequence[str], rollouts: int, max_tokens: int,
          retrieval: Retrieval, seed: int, echo: Echo) -> Learned:
    """One epoch of training-free GRPO for every honest node, into its own store (see module docstring)."""
    config = LearnConfig(group_size=rollouts, max_tokens=max_tokens, epochs=1, seed=seed, retrieval=retrieval)
    pooled = Learner(work.llm, None, config)  # rollouts only: with no store they carry no lessons
    progress = Progress(echo, "rollouts", sum(len(s.tasks) for s in work.train) * rollouts)
    per_step = max(1, STEP // rollouts)
    groups = []
    for start, part in enumerate(_chunks([t for s in work.train for t in s.tasks], per_step)):
        before = pooled.stats.completion_tokens
        groups += pooled.rollouts(work.tasks, part, seed=seed * 100_003 + start)
        progress.step(len(part) * rollouts, pooled.stats.completion_tokens - before)
    nodes, tokens, offset, baseline = [], pooled.stats.tokens, 0, None
    for i, (store, node_id, own) in enumerate(zip(stores, node_ids, work.train)):
        mine, offset = groups[offset:offset + len(own.tasks)], offset + len(own.tasks)
        learner = Learner(work.llm, store, config, node_id=node_id)
        learner.use_validation(work.validation, baseline)  # every node gates on one slice: measure "without" once
        baseline = learner.baseline
        results = learner.learn_groups(mine)
        kept = [r.operation.text or r.operation.proposal.text for r in results
                if r.applied and r.operation.op in ("ADD", "UPDATE")]
        s = learner.stats
        nodes.append(NodeLearning(kept, [r for g in mine for r in g.rewards], len(mine), s.mixed_groups,
                                  s.proposals, s.skipped, s.gated_out))
        tokens += s.tokens
        echo(f"      node{i}: {s.mixed_groups}/{len(mine)} groups with mixed rewards, {s.proposals} proposals, "
             f"{s.gated_out} refused by the validation gate, {len(kept)} lessons kept")
    return Learned(nodes, tokens)


def threshold(work: Workload, stores: Sequence) -> float:
    """The retrieval threshold measured on the validation questions against the nodes' own lessons
    (`dsonet.learn.context.measured_threshold`); the protocol's 0.6 without a validation slice."""
    questions = [t.question for t in work.validation.tasks]
    if not questions:
        return MIN_SIMILARITY
    domain = work.validation.tasks[0].domain
    return measured_threshold(np.concatenate([best_scores(s, questions, domain) for s in stores if s.all()] or [[]]))


def answer(work: Workload, stores: Sequence, node_ids: Sequence[str], max_tokens: int, retrieval: Retrieval,
           echo: Echo, label: str) -> Answers:
    """Every held-out task, task i by honest node i mod H from ``stores[i mod H]`` (None: no lessons)."""
    held, n = work.held_out, len(work.held_out.tasks)
    correct, parsed = np.zeros(n), np.zeros(n, bool)
    lessons, chats, responses, tokens = [[]] * n, [[]] * n, [""] * n, 0
    progress = Progress(echo, f"{label}: answers", n)
    for k, (store, node_id) in enumerate(zip(stores, node_ids)):
        rows = list(range(k, n, len(stores)))
        if not rows:
            continue
        part = held.subset([held.tasks[i] for i in rows])
        run = evaluate.answer(work.llm, part, store, retrieval, max_tokens=max_tokens, node_id=node_id)
        correct[rows], parsed[rows], tokens = run.correct, run.parsed, tokens + run.tokens
        for i, task, hits, text in zip(rows, part.tasks, run.hits, run.texts):
            lessons[i], responses[i] = hits, text
            chats[i] = messages(held.prompt(task), *split_own(hits, node_id))  # what `answer` sent
        progress.step(len(rows))
    return Answers(correct, parsed, lessons, chats, responses, tokens)


def _distinct(tasks: list[Task]) -> list[Task]:
    """The first task of each question, in order."""
    first: dict[str, Task] = {}
    for task in tasks:
        first.setdefault(task.question, task)
    return list(first.values())


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]
