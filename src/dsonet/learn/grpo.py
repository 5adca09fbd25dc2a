"""Training-free GRPO (Tencent youtu-agent, arXiv 2510.08191): learn experiences, not weights.

Per batch of queries:
  1. rollouts  — G samples per query at temperature 0.7, each prompt carrying the experiences
                 the library currently retrieves for it; the verifier scores each sample;
  2. advantage — for each group with mixed rewards, the best and the worst attempt (long
                 ones summarised first) are compared and the LLM proposes lessons
                 "When [condition], [strategy]" (≤ 32 words, tagged with the task's domain,
                 confidence from the reward gap);
  3. update    — each proposal becomes ADD / UPDATE / DELETE / NONE against the similar
                 experiences already in the library (see operations.py), duplicates merged.
Epochs reshuffle the training queries; the library carries over between batches, so later
rollouts are steered by earlier lessons — the "policy update" of the method.

Choices the paper leaves open: only rollouts longer than ``summary_words`` are summarised
(short answers are their own summary, and summarising them costs a weak model more than it
gives); the comparison is best-vs-worst, one call per group. The run directory holds
state.json (the next batch to run; written after each batch, so an interrupted run resumes
there — a batch cut short is redone, which is safe because ADDs are idempotent) and
log.jsonl (every rollout, reward, proposal, operation and skipped output).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from dsonet.errors import DsoError
from dsonet.experience import Provenance
from dsonet.learn import parse, prompts
from dsonet.learn.context import Retrieval, with_experiences
from dsonet.learn.llm import ChatLLM, user
from dsonet.learn.operations import (ExperienceStore, Operation, Proposal, apply,
                                     confidence_from_gap, decide, listing)
from dsonet.learn.tasks import Group, TaskSet


class LearnError(DsoError, ValueError):
    """A run directory that belongs to a different run, or bad learner settings."""


@dataclass(frozen=True)
class LearnConfig:
    group_size: int = 5  # G rollouts per query (Training-free GRPO; the federated paper uses 4)
    temperature: float = 0.7  # rollout temperature (paper)
    max_tokens: int = 128  # per rollout; keep small on CPU
    epochs: int = 3  # passes over the training queries (paper: 3)
    batch_size: int = 8  # queries per library update
    max_lessons: int = 2  # proposals per mixed group
    summary_words: int = 60  # rollouts longer than this are summarised before comparison
    note_tokens: int = 64  # budget of each summary, comparison and operation reply
    retrieval: Retrieval = field(default_factory=Retrieval)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("group_size", "epochs", "batch_size", "max_lessons", "max_tokens", "note_tokens"):
            if getattr(self, name) < 1:
                raise LearnError(f"{name}: {getattr(self, name)}; must be at least 1")
        if self.group_size < 2:
            raise LearnError(f"group_size: {self.group_size}; a group needs at least 2 rollouts to compare")


@dataclass
class Stats:
    batches: int = 0
    rollouts: int = 0
    reward_sum: float = 0.0
    groups: int = 0
    mixed_groups: int = 0
    proposals: int = 0
    skipped: int = 0  # malformed LLM outputs: no lesson, bad operation, unknown id, too long
    operations: dict = field(default_factory=lambda: {"ADD": 0, "UPDATE": 0, "DELETE": 0, "NONE": 0})
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.rollouts if self.rollouts else 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Learner:
    def __init__(self, llm: ChatLLM, store: ExperienceStore, config: LearnConfig = LearnConfig(),
                 run_dir: str | Path | None = None, node_id: str = ""):
        self.llm, self.store, self.config, self.node_id = llm, store, config, node_id
        self.run_dir = Path(run_dir) if run_dir else None
        self.stats = Stats()
        self._where = {"epoch": 0, "batch": 0}

    # -- bookkeeping ------------------------------------------------------------------
    def _log(self, kind: str, **record) -> None:
        if self.run_dir is not None:
            with open(self.run_dir / "log.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"type": kind, **self._where, **record}) + "\n")

    def _skip(self, stage: str, reason: str, raw: str = "") -> None:
        self.stats.skipped += 1
        self._log("skipped", stage=stage, reason=reason, raw=raw[:500])

    def _generate(self, texts: Sequence[str], n: int = 1, temperature: float = 0.0, max_tokens: int | None = None,
                  seed: int | None = None) -> list[tuple[str, ...]]:
        if not texts:
            return []
        out = self.llm.generate([user(t) for t in texts], n=n, temperature=temperature,
                                max_tokens=max_tokens or self.config.note_tokens, seed=seed)
        self.stats.prompt_tokens += sum(c.prompt_tokens for c in out)
        self.stats.completion_tokens += sum(c.completion_tokens for c in out)
        return [c.texts for c in out]

    def _identity(self) -> dict:
        return {"prompts_version": prompts.PROMPTS_VERSION, "config": asdict(self.config)}

    # -- the three steps -------------------------------------------------------------
    def rollouts(self, tasks: TaskSet, batch: Sequence, seed: int) -> list[Group]:
        tokenizer = getattr(self.llm, "tokenizer", None)
        chats = [with_experiences(self.store, t.question, tasks.prompt(t), self.config.retrieval, tokenizer)
                 for t in batch]
        samples = self._generate([c[0] for c in chats], n=self.config.group_size, temperature=self.config.temperature,
                                 max_tokens=self.config.max_tokens, seed=seed)
        groups = []
        for task, (_, hits), texts in zip(batch, chats, samples):
            rewards = tuple(float(tasks.verify(task, r)) for r in texts)
            groups.append(Group(task.question, task.domain, texts, rewards))
            for i, (r, w) in enumerate(zip(texts, rewards)):
                self._log("rollout", task=task.id, sample=i, response=r, reward=w,
                          experiences=[h.experience.id for h in hits])
        return groups

    def propose(self, groups: Sequence[Group]) -> list[Proposal]:
        mixed = [g for g in groups if g.mixed]
        self.stats.groups += len(groups)
        self.stats.mixed_groups += len(mixed)
        pairs = [(int(np.argmax(g.rewards)), int(np.argmin(g.rewards))) for g in mixed]
        texts = {(gi, i): mixed[gi].responses[i] for gi, pair in enumerate(pairs) for i in pair}
        long = [key for key, t in texts.items() if len(t.split()) > self.config.summary_words]
        summaries = self._generate([prompts.SUMMARISE.format(problem=mixed[gi].query, attempt=texts[gi, i],
                                                             reward=mixed[gi].rewards[i]) for gi, i in long])
        texts.update({key: s[0] for key, s in zip(long, summaries)})
        replies = self._generate([prompts.COMPARE.format(
            problem=g.query, best=texts[gi, b], worst=texts[gi, w], best_reward=g.rewards[b],
            worst_reward=g.rewards[w], max_lessons=self.config.max_lessons)
            for gi, (g, (b, w)) in enumerate(zip(mixed, pairs))])
        out = []
        for g, (b, w), reply in zip(mixed, pairs, replies):
            parsed = parse.experiences(reply[0], self.config.max_lessons)
            for reason in parsed.skipped:
                self._skip("propose", reason, reply[0])
            conf = confidence_from_gap(g.rewards[b], g.rewards[w])
            for text in parsed.items:
                out.append(Proposal(text, g.domain, conf, g.query[:80]))
                self._log("proposal", text=text, domain=g.domain, confidence=conf)
        self.stats.proposals += len(out)
        return out

    def update(self, proposals: Sequence[Proposal], iteration: int = 0) -> list:
        ops: list[Operation] = []
        asks = []  # (proposal, short-id map) for proposals that have similar experiences
        for p in proposals:
            similar = [h.experience for h in self.store.search(
                p.text, k=self.config.retrieval.k, min_similarity=self.config.retrieval.min_similarity, domain=p.domain)]
            if not similar:  # nothing to update or delete: ADD (near-duplicates become NONE in apply)
                ops.append(Operation("ADD", p))
            else:
                asks.append((p, *listing(similar)))
        replies = self._generate([prompts.OPERATION.format(existing=lines, proposal=p.text) for p, lines, _ in asks])
        for (p, _, ids), reply in zip(asks, replies):
            op, why = decide(p, reply[0], ids)
            if op is None:
                self._skip("operation", why, reply[0])
            else:
                ops.append(op)
        prov = Provenance(self.node_id, self.llm.name, int(time.time() * 1000), iteration)
        results = apply(self.store, ops, provenance=prov)
        for r in results:
            self.stats.operations[r.operation.op] += int(r.applied or r.operation.op == "NONE")
            self._log("operation", op=r.operation.op, text=r.operation.text or r.operation.proposal.text,
                      target=r.operation.target, applied=r.applied, detail=r.detail)
        return results

    def learn_groups(self, groups: Sequence[Group], iteration: int = 0) -> list:
        """Steps 2 and 3 on groups scored elsewhere (e.g. tool telemetry)."""
        return self.update(self.propose(groups), iteration)

    # -- the run -----------------------------------------------------------------------
    def _load_state(self, tasks: TaskSet) -> int:
        if self.run_dir is None:
            return 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "state.json"
        if not path.exists():
            return 0
        state = json.loads(path.read_text())
        mine = {**self._identity(), "task": tasks.name, "n_tasks": len(tasks.tasks)}
        theirs = {k: state.get(k) for k in mine}
        if json.loads(json.dumps(mine)) != theirs:
            raise LearnError(f"run_dir: {self.run_dir} holds a run with other settings ({theirs}); "
                             "use a new --run-dir to start afresh, or repeat that run's settings to resume it")
        s = state["stats"]
        self.stats = Stats(**{**s, "operations": dict(s["operations"])})
        return int(state["next"])

    def _save_state(self, tasks: TaskSet, next_batch: int) -> None:
        if self.run_dir is None:
            return
        state = {**self._identity(), "task": tasks.name, "n_tasks": len(tasks.tasks), "next": next_batch,
                 "stats": asdict(self.stats)}
        tmp = self.run_dir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.run_dir / "state.json")  # atomic: a crash leaves the old or the new state

    def schedule(self, tasks: TaskSet) -> list[tuple[int, list]]:
        """(epoch, batch of tasks) in run order; each epoch is a fresh seeded shuffle."""
        out = []
        for epoch in range(self.config.epochs):
            order = np.random.default_rng(self.config.seed + epoch).permutation(len(tasks.tasks))
            for start in range(0, len(order), self.config.batch_size):
                out.append((epoch, [tasks.tasks[i] for i in order[start:start + self.config.batch_size]]))
        return out

    def run(self, tasks: TaskSet, progress: bool = True) -> Stats:
        from tqdm.auto import tqdm

        if not tasks.tasks:
            raise LearnError(f"tasks: {tasks.name} has no tasks to learn from")
        start = self._load_state(tasks)
        plan = self.schedule(tasks)
        bar = tqdm(total=len(plan), initial=start, desc=f"learn {tasks.name}", unit="batch", disable=not progress)
        for index in range(start, len(plan)):
            epoch, batch = plan[index]
            self._where = {"epoch": epoch, "batch": index}
            t0 = time.perf_counter()
            groups = self.rollouts(tasks, batch, seed=self.config.seed * 100_003 + index)
            rewards = [r for g in groups for r in g.rewards]
            self.stats.rollouts += len(rewards)
            self.stats.reward_sum += sum(rewards)
            self.learn_groups(groups, iteration=epoch)
            self.stats.batches += 1
            self.stats.wall_s += time.perf_counter() - t0
            self._save_state(tasks, index + 1)
            bar.update(1)
            bar.set_postfix(reward=f"{np.mean(rewards):.2f}", mean=f"{self.stats.mean_reward:.2f}",
                            added=self.stats.operations["ADD"], skipped=self.stats.skipped)
        bar.close()
        return self.stats
