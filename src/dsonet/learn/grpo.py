"""Training-free GRPO (Tencent youtu-agent `utu/practice/`, arXiv 2510.08191): learn lessons, not weights.

Per step (a batch of training queries):
  1. rollouts  — G samples per query at temperature 0.7, each prompt carrying the lessons the
                 library currently retrieves for it (the "policy"); the verifier scores each;
  2. advantage — for every group with mixed rewards, every rollout is summarised with the
                 reference answer in view, then the LLM reads all G summaries and the reference
                 and proposes at most ``max_lessons`` general lessons "When [condition], [strategy]"
                 (≤ 32 words). Lessons that name the problem's numbers, quoted words or answer,
                 and a last lesson cut off by the token limit, are rejected with the reason logged.
                 On code (``rule_lessons``), a failed attempt's error line beside the reference, or
                 where it names nothing the reference alone, spells out a candidate with no model;
  3. update    — one batch call per domain shows the domain's library (E1, E2 ...) and the step's
                 candidates (C1, C2 ...) and chooses ADD / UPDATE / DELETE / NONE for each;
                 with an empty domain library every candidate is an ADD and no call is spent;
  4. gate      — with a validation slice of training items, an ADD or UPDATE is applied only if
                 accuracy with that lesson alone in the prompt is not below accuracy without
                 lessons (ACE and ReasoningBank keep only what validates) nor below accuracy with
                 neutral text of the lesson's length in its place (`learn.control`: a longer prompt
                 moves a small model's answers by itself; where the model is almost always wrong,
                 "not below without" alone admits any text); the validation answers are recorded
                 as the lesson's first uses (helped = correct).
After each epoch the library is scored on the validation slice as it will be used (retrieval);
when an epoch ends below the best epoch so far, the lessons added since the best epoch are
deleted, so the run ends with the best validation epoch's library. (Lessons that a later epoch
deleted or updated cannot come back: the library's tombstones win for ever; the log says so.)

Choices the reference leaves open: a rollout of at most ``summary_words`` words is its own
summary (an "Answer: 3/4" reply says all a summary would, and a small model spends seconds
per summary); the summary and advantage budgets are ``note_tokens``. The run directory (`learn.run_dir`) holds
state.json (the next step; written after each step, so an interrupted run resumes there) and
log.jsonl (every rollout, reward, summary, proposal, rejection, operation and gate decision).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from dsonet.experience import Provenance
from dsonet.learn import code_lessons, parse, prompts
from dsonet.learn.chat import ChatLLM, Prefills, user
from dsonet.learn.config import LearnConfig
from dsonet.learn.context import inject, messages
from dsonet.learn.episodes import PROBATION
from dsonet.learn.control import neutral_notes
from dsonet.learn.operations import (Operation, Proposal, apply, confidence_from_gap, decide_batch, listing,
                                     merge_duplicate_adds)
from dsonet.learn.run_dir import LearnError, RunDir, Stats
from dsonet.learn.tasks import Group, TaskSet
from dsonet.library.contract import LessonStore, RecordsOutcomes, record_on_members
from dsonet.scope import Probe


class Learner:
    """``reflector``: the LLM that summarises, extracts the advantage and updates the library, when it
    is not the one that answers (a small agent with a stronger teacher); by default ``llm`` does all.
    ``encoder``: ranks validation items by their nearness to a lesson, for ``config.gate_items``.
    ``environment``: what the interpreter the attempts ran in has (`dsonet.scope.probe`): each lesson
    it adds is scoped to Python's version and the distributions its text names there."""

    def __init__(self, llm: ChatLLM, store: LessonStore, config: LearnConfig = LearnConfig(),
                 run_dir: str | Path | None = None, node_id: str = "", reflector: ChatLLM | None = None,
                 encoder=None, environment: Probe | None = None):
        if config.gate_items and encoder is None:
            raise LearnError(f"gate_items: {config.gate_items} ranks validation items by nearness to a lesson; "
                             "pass the encoder (Learner(..., encoder=library.encoder)) or use gate_items=0")
        self.llm, self.store, self.config, self.node_id, self.encoder = llm, store, config, node_id, encoder
        self.environment = environment
        self.reflector = reflector or llm
        self._val_vectors: np.ndarray | None = None  # the validation questions' encodings, for gate_items
        self.run_dir = RunDir(run_dir)
        self.stats = Stats()
        self._where = {"epoch": 0, "batch": 0}
        self.validation: TaskSet | None = None
        self._baseline: np.ndarray | None = None  # validation correctness without lessons
        self._neutral: dict[tuple, float] = {}  # accuracy with neutral text, per (word count, items)
        self._gate_uses: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # lesson: (items, correct with it), per step
        self._repaired: set[str] = set()  # error lines' lessons whose swap fixed their own attempt (repair_check)

    # -- bookkeeping ------------------------------------------------------------------
    def _log(self, kind: str, **record) -> None:
        self.run_dir.log(kind, **self._where, **record)

    def _skip(self, stage: str, reason: str, raw: str = "") -> None:
        self.stats.skipped += 1
        self._log("skipped", stage=stage, reason=reason, raw=raw[:500])

    def _generate(self, chats: Sequence, n: int = 1, temperature: float = 0.0, max_tokens: int | None = None,
                  seed: int | None = None, llm: ChatLLM | None = None) -> list:
        if not chats:
            return []
        out = (llm or self.llm).generate([c if isinstance(c, list) else user(c) for c in chats], n=n, temperature=temperature,
                                max_tokens=max_tokens or self.config.note_tokens, seed=seed)
        self.stats.prompt_tokens += sum(c.prompt_tokens for c in out)
        self.stats.completion_tokens += sum(c.completion_tokens for c in out)
        return out

    def _identity(self, tasks: TaskSet) -> dict:
        """What a run directory knows this run by (`RunDir`)."""
        return {"prompts_version": prompts.PROMPTS_VERSION, "config": asdict(self.config),
                "reflector": self.reflector.name, "task": tasks.name, "n_tasks": len(tasks.tasks)}

    # -- the steps ---------------------------------------------------------------------
    def rollouts(self, tasks: TaskSet, batch: Sequence, seed: int) -> list[Group]:
        chats = [inject(self.store, t.question, tasks.prompt(t), self.config.retrieval, self.node_id, t.domain)
                 for t in batch]
        samples = self._generate([c.chat for c in chats], n=self.config.group_size,
                                 temperature=self.config.temperature, max_tokens=self.config.max_tokens, seed=seed)
        groups = []
        for task, injection, completion in zip(batch, chats, samples):
            rewards = tuple(float(tasks.verify(task, r)) for r in completion.texts)
            shown = tuple(tasks.explain(task, r) for r in completion.texts) if tasks.explain else ()
            check = (lambda reply, task=task: float(tasks.verify(task, reply))) if tasks.explain else None
            groups.append(Group(task.question, task.domain, completion.texts, rewards, task.answer, shown, check))
            for hit in injection.hits:  # every use of a lesson is an outcome: did the rollout succeed?
                for w in rewards:
                    self._record(hit, w >= 1.0)
            for i, (r, w) in enumerate(zip(completion.texts, rewards)):
                self._log("rollout", task=task.id, sample=i, response=r, reward=w,
                          experiences=[h.experience.id for h in injection.hits])
        return groups

    def _record(self, hit, helped: bool) -> None:
        if isinstance(self.store, RecordsOutcomes):
            record_on_members(self.store, [hit], helped)

    def propose(self, groups: Sequence[Group]) -> list[Proposal]:
        self.stats.groups += len(groups)
        self.stats.mixed_groups += sum(g.mixed for g in groups)
        failed = lambda g: self.config.all_failed and bool(g.feedback) and bool(g.reference) and max(g.rewards) < 1  # noqa: E731
        mixed = [g for g in groups if g.mixed or failed(g)]
        shared = {d: parse.shared_words([g.query for g in groups if g.domain == d]) for d in {g.domain for g in mixed}}
        ruled = [self._rule_lessons(g, shared[g.domain]) for g in mixed]
        reflect = [g for g, rule in zip(mixed, ruled) if not (self.config.rule_first and rule)]
        summaries = self._summaries(reflect)
        # A back end that can continue a started reply gets "When" as the reply's start and writes one
        # lesson line: a 0.5B model asked for free text rambles past its budget and restates the problem.
        prefills = isinstance(self.reflector, Prefills) and self.reflector.supports_prefill
        prefill = [{"role": "assistant", "content": "When"}] if prefills else []
        n = self.config.candidates
        replies = self._generate([user((prompts.ADVANTAGE_CODE if g.feedback else prompts.ADVANTAGE).format(
            problem=g.query, reference=g.reference or "unknown", max_lessons=self.config.max_lessons,
            summaries="\n".join(summaries[gi]), example=prompts.CODE_EXAMPLE)) + prefill for gi, g in enumerate(reflect)],
            n=n, temperature=self.config.temperature if n > 1 else 0.0,
            max_tokens=self.config.note_tokens if not prefill else 64, llm=self.reflector) if reflect else []
        reflected = {id(g): reply for g, reply in zip(reflect, replies)}
        out = []
        for g, rule in zip(mixed, ruled):
            reply = reflected.get(id(g))
            truncated = reply is not None and reply.completion_tokens >= self.config.note_tokens * n
            conf = confidence_from_gap(max(g.rewards), min(g.rewards))
            for text in (reply.texts if reply is not None else ()) + rule:
                parsed = parse.experiences(text, self.config.max_lessons, (prompts.CODE_EXAMPLE,), problem=g.query,
                                           reference=g.reference, truncated=truncated, shared=shared[g.domain])
                for reason in parsed.skipped:
                    self._skip("propose", reason, text)
                for lesson in parsed.items:
                    out.append(Proposal(lesson, g.domain, conf, g.query[:80]))
                    self._log("proposal", text=lesson, domain=g.domain, confidence=conf)
        self.stats.proposals += len(out)
        return out

    def _rule_lessons(self, g: Group, shared: frozenset[str]) -> tuple[str, ...]:
        """The first lesson a failed attempt's error line spells out (``config.rule_lessons``), logged apart:
        of its phrasings (`code_lessons.from_error`), the most specific one that restates nothing of this
        problem. (Phrased with the task alone, 48 of the 88 in the drift bench's three seeds restated one of
        its numbers or names and were refused, and their groups went without a lesson.) Where no error line
        spells one out, the lesson the reference spells out (`code_lessons.from_reference`): in those three
        seeds 116 of 216 change facts' groups failed with a wrong value or a name never defined, and the
        reflector's lessons for them were kept 9 times in 118."""
        if not (self.config.rule_lessons and g.feedback):
            return ()
        failed = [(response, error) for response, reward, error in zip(g.responses, g.rewards, g.feedback) if reward < 1]
        for response, error in failed:
            for lesson in code_lessons.from_error(g.query, _one_line(response), error, g.reference):
                kept = parse.experiences(lesson, 1, problem=g.query, reference=g.reference, shared=shared).items
                if kept:
                    repaired = self._repairs(g, response, error)
                    if repaired:
                        self._repaired.add(kept[0])
                    self._log("rule_lesson", text=lesson, error=error, repaired=repaired, source="error")
                    return (lesson,)
        for lesson in code_lessons.from_reference(g.query, _one_line(failed[0][0]), g.reference) if failed else ():
            if parse.experiences(lesson, 1, problem=g.query, reference=g.reference, shared=shared).items:
                self._log("rule_lesson", text=lesson, error=failed[0][1], repaired=False, source="reference")
                return (lesson,)
        return ()

    def _repairs(self, g: Group, response: str, error: str) -> bool:
        """Whether the swap an error line's lesson advises, made in the failed ``response``, passes its check."""
        if not (self.config.repair_check and g.check):
            return False
        fixed = code_lessons.repair(g.query, response, error, g.reference)
        return fixed is not None and g.check(fixed) >= 1.0

    def _summaries(self, mixed: Sequence[Group]) -> list[list[str]]:
        """Per group, one line per attempt for the advantage prompt. Code that was run is shown as it is,
        with what running it showed; other attempts longer than ``summary_words`` are summarised first."""
        summaries = {(gi, i): r for gi, g in enumerate(mixed) for i, r in enumerate(g.responses)}
        long = [key for key, text in summaries.items()
                if not mixed[key[0]].feedback and len(text.split()) > self.config.summary_words]
        done = self._generate([prompts.SUMMARISE.format(problem=mixed[gi].query, reference=mixed[gi].reference or
                                                        "unknown", attempt=summaries[gi, i], reward=mixed[gi].rewards[i])
                               for gi, i in long], llm=self.reflector)
        for key, c in zip(long, done):
            summaries[key] = " ".join(c.texts[0].split())
            self._log("summary", group=key[0], sample=key[1], summary=summaries[key])
        return [[f"Attempt {i + 1} (score {g.rewards[i]:g}): {summaries[gi, i]}" if not g.feedback else
                 f"Attempt {i + 1} ({'passed' if g.rewards[i] >= 1 else 'failed'}): {_one_line(summaries[gi, i])} -> "
                 f"{g.feedback[i]}" for i in range(len(g.responses))] for gi, g in enumerate(mixed)]

    def decide(self, proposals: Sequence[Proposal]) -> list[Operation]:
        """One batch-update call per domain that already holds lessons; ADD for every candidate otherwise."""
        ops: list[Operation] = []
        by_domain: dict[str, list[Proposal]] = {}
        for p in proposals:
            by_domain.setdefault(p.domain, []).append(p)
        asks = []
        for domain, props in by_domain.items():
            existing = [e for e in self.store.all() if e.domain == domain]
            if not existing:
                ops += [Operation("ADD", p) for p in props]
            else:
                lines, ids = listing(existing)
                asks.append((props, lines, ids))
        replies = self._generate([prompts.UPDATE.format(
            existing=lines, candidates="\n".join(f"C{i + 1}: {p.text}" for i, p in enumerate(props)))
            for props, lines, _ in asks], max_tokens=self.config.update_tokens, llm=self.reflector)
        for (props, _, ids), reply in zip(asks, replies):
            decided, skipped = decide_batch(props, reply.texts[0], ids)
            for reason in skipped:
                self._skip("operation", reason, reply.texts[0])
            ops += decided
            if self.validation is not None:
                # A candidate the reply garbled (an id never shown, no operation) was not judged, only lost:
                # with a gate, it is added and judged by execution. The drift bench lost an error line's
                # np.trapezoid lesson to an "UPDATE E5" when E1-E2 were shown.
                answered = {op.proposal for op in decided}
                ops += [Operation("ADD", p) for p in props if p not in answered]
        return ops

    def gate(self, ops: Sequence[Operation]) -> list[Operation]:
        """The operations whose new lesson does not lower validation accuracy (all of them without a slice);
        of several candidates from one group (``config.candidates``), the best that passes."""
        if self.validation is None:
            return list(ops)
        kept: dict[object, tuple[float, Operation]] = {}
        for index, op in enumerate(ops):
            text = op.text if op.op == "UPDATE" else op.proposal.text
            if op.op not in ("ADD", "UPDATE"):
                kept[index] = (0.0, op)
                continue
            if op.op == "UPDATE":
                op = self._update_or_add(op, text)
            items = self._gate_items(text)
            with_ = self.validation_correct(own=[text], items=items)[0]
            without = float(self._baseline[items].mean())
            neutral = self._neutral_accuracy(len(text.split()), items)
            gain = float(with_.mean()) - max(without, neutral)
            repaired = text in self._repaired
            ok = gain >= (0.0 if repaired else self.config.gate_gain)
            probation = not ok and self.config.probation and gain >= 0.0
            self._log("gate", text=text, op=op.op, items=[self.validation.tasks[i].id for i in items],
                      accuracy_with=round(float(with_.mean()), 4), accuracy_without=round(without, 4),
                      accuracy_neutral=round(neutral, 4), repaired=repaired, kept=bool(ok), probation=probation)
            if probation:
                self.stats.on_probation += 1
                op, gain = replace(op, proposal=replace(op.proposal, confidence=PROBATION)), -1.0  # any kept one wins
            elif not ok:
                self.stats.gated_out += 1
                continue
            self._gate_uses[text] = (items, with_)
            key = op.proposal.source if self.config.candidates > 1 else index
            if key not in kept or gain > kept[key][0]:
                if key in kept:
                    self.stats.gated_out += 1  # a better candidate of the same group replaces it
                kept[key] = (gain, op)
            else:
                self.stats.gated_out += 1
        return [op for _, op in kept.values()]

    def _update_or_add(self, op: Operation, text: str) -> Operation:
        """An UPDATE replaces a lesson, so it must beat that lesson on both lessons' gate items; one that
        does not is an ADD beside it (judged like any), so a lesson the gate kept is never traded away
        (the drift bench: a verified nx.from_numpy_array lesson rewritten into one about pivot)."""
        old = self.store.get(op.target)
        if old is None:
            return op
        items = np.union1d(self._gate_items(old.text), self._gate_items(text))
        before = float(self.validation_correct(own=[old.text], items=items)[0].mean())
        after = float(self.validation_correct(own=[text], items=items)[0].mean())
        self._log("update_gate", text=text, target=op.target, items=[self.validation.tasks[i].id for i in items],
                  accuracy_old=round(before, 4), accuracy_new=round(after, 4), update=after > before)
        return op if after > before else Operation("ADD", op.proposal if op.proposal.text == text else
                                                   replace(op.proposal, text=text))

    def _gate_items(self, lesson: str) -> np.ndarray:
        """Indices of the validation items a lesson is judged on: all, or (``gate_items``) the nearest to it
        and half as many others drawn at random."""
        n = len(self.validation.tasks)
        if not self.config.gate_items or self.config.gate_items >= n:
            return np.arange(n)
        if self._val_vectors is None:
            self._val_vectors = self.encoder.encode([t.question for t in self.validation.tasks], kind="query")
        scores = self._val_vectors @ self.encoder.encode([lesson], kind="document")[0]  # (n,)
        near = np.argsort(-scores)[:self.config.gate_items]
        rest = np.setdiff1d(np.arange(n), near)
        seed = int.from_bytes(lesson.encode()[:8].ljust(8, b"\0"), "little")  # the same lesson, the same items
        far = np.random.default_rng(seed).choice(rest, size=min(len(rest), self.config.gate_items // 2), replace=False)
        return np.sort(np.concatenate([near, far]))

    def _neutral_accuracy(self, words: int, items: np.ndarray) -> float:
        key = (words, items.tobytes())
        if key not in self._neutral:
            self._neutral[key] = float(self.validation_correct(own=neutral_notes([words]), items=items)[0].mean())
        return self._neutral[key]

    def validation_correct(self, own: Sequence[str] = (), retrieved: bool = False,
                           items: np.ndarray | None = None) -> tuple[np.ndarray, list]:
        """Per-item correctness on the validation slice (or its ``items``): with ``own`` lessons in every
        prompt, or with what the library retrieves for each item (``retrieved``); and the hits used per item."""
        val = self.validation
        tasks = val.tasks if items is None else [val.tasks[i] for i in items]
        if retrieved:
            injections = [inject(self.store, t.question, val.prompt(t), self.config.retrieval, self.node_id, t.domain)
                          for t in tasks]
            chats, hits = [i.chat for i in injections], [i.hits for i in injections]
        else:
            chats, hits = [messages(val.prompt(t), list(own)) for t in tasks], [[] for _ in tasks]
        out = self._generate(chats, temperature=0.0, max_tokens=self.config.max_tokens, seed=0)
        correct = np.array([val.verify(t, c.texts[0]) >= 1.0 for t, c in zip(tasks, out)], float)
        return correct, hits

    def update(self, proposals: Sequence[Proposal], iteration: int = 0) -> list:
        self._gate_uses = {}
        ops = self.gate(merge_duplicate_adds(self.decide(proposals)))  # gate each distinct lesson once
        prov = Provenance(self.node_id, self.llm.name, int(time.time() * 1000), iteration)
        results = apply(self.store, ops, provenance=prov,
                        scope_of=None if self.environment is None else self.environment.lesson_scope)
        for r in results:
            self.stats.operations[r.operation.op] += int(r.applied or r.operation.op == "NONE")
            text = r.operation.text or r.operation.proposal.text
            self._log("operation", op=r.operation.op, text=text, target=r.operation.target, applied=r.applied,
                      detail=r.detail)
            if r.applied and r.operation.op in ("ADD", "UPDATE") and text in self._gate_uses:
                for helped in self._gate_uses[text][1] if isinstance(self.store, RecordsOutcomes) else ():
                    self.store.record_outcome(r.detail, bool(helped))
        return results

    def learn_groups(self, groups: Sequence[Group], iteration: int = 0) -> list:
        """Steps 2-4 on groups scored elsewhere (e.g. tool telemetry)."""
        return self.update(self.propose(groups), iteration)

    # -- epochs and the best library -----------------------------------------------------
    def end_epoch(self, epoch: int, added_since: dict[int, list[str]]) -> None:
        """Score the library on the validation slice; roll back to the best epoch when this one is worse."""
        if self.validation is None:
            return
        correct, _ = self.validation_correct(retrieved=True)
        acc = float(correct.mean())
        self.stats.validation.append(round(acc, 4))
        scores = np.array(self.stats.validation)
        best = int(np.flatnonzero(scores == scores.max())[-1])  # ties go to the later epoch, as the gate's "not below"
        self._log("epoch", validation_accuracy=acc, best_epoch=best, lessons=len(self.store.all()))
        if best < len(self.stats.validation) - 1:
            dropped = [i for e in range(best, epoch + 1) for i in added_since.get(e, []) if self.store.get(i)]
            for exp_id in dropped:
                self.store.delete(exp_id)
            self._log("rollback", to_epoch=best, deleted=dropped)

    # -- the run -----------------------------------------------------------------------
    def schedule(self, tasks: TaskSet) -> list[tuple[int, list]]:
        """(epoch, batch of tasks) in run order; each epoch is a fresh seeded shuffle."""
        out = []
        for epoch in range(self.config.epochs):
            order = np.random.default_rng(self.config.seed + epoch).permutation(len(tasks.tasks))
            for start in range(0, len(order), self.config.batch_size):
                out.append((epoch, [tasks.tasks[i] for i in order[start:start + self.config.batch_size]]))
        return out

    def use_validation(self, validation: TaskSet | None, baseline: np.ndarray | None = None) -> None:
        """Gate new lessons on ``validation`` (training items held apart; None: no gate). ``baseline``:
        its per-item correctness without lessons, when already measured (nodes sharing one slice)."""
        self.validation = validation if validation is not None and validation.tasks else None
        self._neutral = {}
        if self.validation is None:
            return
        self._baseline = baseline if baseline is not None else self.validation_correct()[0]
        if not self.stats.validation:
            self.stats.validation.append(round(float(self._baseline.mean()), 4))

    @property
    def baseline(self) -> np.ndarray | None:
        """Validation correctness without lessons (None without a validation slice)."""
        return self._baseline if self.validation is not None else None

    def run(self, tasks: TaskSet, progress: bool = True, validation: TaskSet | None = None) -> Stats:
        """Learn from ``tasks``; with ``validation`` (training items held apart), gate every new lesson
        and keep the library of the best validation epoch."""
        if not tasks.tasks:
            raise LearnError(f"tasks: {tasks.name} has no tasks to learn from")
        resume = self.run_dir.resume(self._identity(tasks))
        start, added = resume.next, resume.added
        self.stats = resume.stats or self.stats
        self.use_validation(validation)
        plan = self.schedule(tasks)
        bar = tqdm(total=len(plan), initial=start, desc=f"learn {tasks.name}", unit="step", disable=not progress)
        for index in range(start, len(plan)):
            epoch, batch = plan[index]
            self._where = {"epoch": epoch, "batch": index}
            t0 = time.perf_counter()
            groups = self.rollouts(tasks, batch, seed=self.config.seed * 100_003 + index)
            rewards = [r for g in groups for r in g.rewards]
            self.stats.rollouts += len(rewards)
            self.stats.reward_sum += sum(rewards)
            results = self.learn_groups(groups, iteration=epoch)
            added.setdefault(epoch, []).extend(r.detail for r in results if r.applied and r.operation.op in
                                               ("ADD", "UPDATE"))
            self.stats.batches += 1
            if index + 1 == len(plan) or plan[index + 1][0] != epoch:
                self.end_epoch(epoch, added)
            self.stats.wall_s += time.perf_counter() - t0
            self.run_dir.save(self._identity(tasks), index + 1, self.stats, added)
            bar.update(1)
            bar.set_postfix(reward=f"{np.mean(rewards):.2f}", mean=f"{self.stats.mean_reward:.2f}",
                            added=self.stats.operations["ADD"], skipped=self.stats.skipped,
                            tok_s=f"{self.stats.completion_tokens / max(self.stats.wall_s, 1e-9):.1f}")
        bar.close()
        return self.stats


def _one_line(text: str) -> str:
    """A reply as one line for a prompt: code fences and line breaks gone."""
    return " ".join(text.replace("```python", " ").replace("```", " ").split())
