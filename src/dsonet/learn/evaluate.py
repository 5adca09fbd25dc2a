"""Using lessons: `ask` one question, `answer` a task set under a condition, and the statistics.

An evaluation is paired: the same held-out tasks and greedy decoding under each condition, only
the system message differs. Reported per condition: accuracy with a Wilson interval, parse
failures (replies that state no answer of the task's kind), and coverage (the share of prompts
that received lessons). Between conditions: the 95% interval of the paired difference (bootstrap
over tasks) and McNemar's exact p on the discordant pairs. Every lesson used in an answer gets an
outcome recorded in the library (helped = the answer was correct), which feeds eviction.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dsonet.learn.chat import ChatLLM
from dsonet.learn.context import Retrieval, inject, messages, split_own
from dsonet.learn.tasks import TaskSet
from dsonet.library.contract import record_on_members
from dsonet.scope import Scope


@dataclass(frozen=True)
class Answer:
    text: str
    chat: list
    hits: list
    tokens: int


def ask(llm: ChatLLM, store, question: str, retrieval: Retrieval = Retrieval(), max_tokens: int = 256,
        temperature: float = 0.0, seed: int | None = 0, node_id: str | None = None,
        environment: Scope | None = None) -> Answer:
    """Retrieve lessons for ``question`` (in the asker's ``environment`` where given), put them in the
    system message, and generate one answer."""
    injection = inject(store, question, question, retrieval, node_id, environment=environment)
    out = llm.generate([injection.chat], n=1, temperature=temperature, max_tokens=max_tokens, seed=seed)[0]
    return Answer(out.texts[0], injection.chat, injection.hits, out.tokens)


# -- statistics ------------------------------------------------------------------------------

def wilson(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sound at 0% and 100%, unlike p ± z·se)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def _by_task(values: np.ndarray, tasks: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per task: the sum of ``values`` and how many rows it has (one row each where ``tasks`` is None)."""
    if tasks is None:
        return values, np.ones(values.size)
    _, inverse = np.unique(np.asarray(tasks), return_inverse=True)
    return np.bincount(inverse, weights=values), np.bincount(inverse).astype(float)


def paired_bootstrap(with_: np.ndarray, without: np.ndarray, resamples: int = 10_000,
                     seed: int = 0, tasks: np.ndarray | None = None) -> tuple[float, float]:
    """95% interval of mean(with_ − without), resampling tasks (the pairs stay together). ``tasks``:
    each pair's task, where one task was answered several times (a held-out item in every learning
    seed): its pairs are resampled together, so a repeat never counts as one more task."""
    diff = np.asarray(with_, float) - np.asarray(without, float)  # (rows,)
    if diff.size == 0:
        return 0.0, 0.0
    sums, counts = _by_task(diff, tasks)  # (n,) each
    idx = np.random.default_rng(seed).integers(0, sums.size, size=(resamples, sums.size))  # (B, n)
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)  # (B,)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def mcnemar(with_: np.ndarray, without: np.ndarray, tasks: np.ndarray | None = None) -> float:
    """Exact two-sided McNemar p: of the b + c discordant pairs, how unlikely a split this uneven is
    under 'each condition wins a discordant pair half the time' (binomial(b + c, 1/2)). With ``tasks``
    (see `paired_bootstrap`) the pairs are tasks: a task wins where its repeats gained more than lost."""
    a, b = np.asarray(with_) >= 0.5, np.asarray(without) >= 0.5
    gain, _ = _by_task(a.astype(float) - b.astype(float), tasks)
    wins, losses = int((gain > 0).sum()), int((gain < 0).sum())
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return float(min(1.0, 2 * tail))


def task_wilson(correct: np.ndarray, tasks: np.ndarray | None = None) -> tuple[float, float]:
    """`wilson` of a share over tasks: a task answered several times counts once, as its mean."""
    sums, counts = _by_task(np.asarray(correct, float), tasks)
    return wilson(float((sums / counts).sum()), int(sums.size))


# -- answering a task set under one condition ---------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One condition on one task set: per-task correctness, parse failures and who got lessons."""

    correct: np.ndarray  # (n,) 1.0 when the greedy answer was right
    parsed: np.ndarray  # (n,) False when the reply stated no answer of the task's kind
    injected: np.ndarray  # (n,) True when the prompt carried notes
    texts: list
    hits: list  # per task, the library hits injected (empty for fixed notes)
    tokens: int
    wall_s: float

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if self.correct.size else 0.0

    @property
    def coverage(self) -> float:
        return float(self.injected.mean()) if self.injected.size else 0.0

    @property
    def parse_failures(self) -> int:
        return int((~np.asarray(self.parsed, bool)).sum())

    def wilson(self) -> tuple[float, float]:
        return wilson(float(self.correct.sum()), int(self.correct.size))


def answer(llm: ChatLLM, tasks: TaskSet, store=None, retrieval: Retrieval = Retrieval(), notes=None,
           max_tokens: int = 32, node_id: str | None = None, vectors=None, record: bool = False,
           exclude=None, environment: Scope | None = None) -> Run:
    """Greedy answers to every task. Notes come from ``store`` (retrieved per question; with
    ``vectors``, the questions' encodings, so nothing is encoded twice) or from ``notes``: a function
    task -> (own, peers) lists of fixed texts (the neutral control, the poison). ``exclude``: a
    predicate on hits (e.g. lessons from authors the node distrusts). ``record``: write each
    lesson's outcome to the store. ``environment``: the asker's, for the retrieval (`retrieve`)."""
    t0 = time.perf_counter()
    chats, hits, injected = [], [], []
    for i, t in enumerate(tasks.tasks):
        if notes is not None:
            own, peers = notes(t)
            chats.append(messages(tasks.prompt(t), own, peers))
            hits.append([])
            injected.append(bool(own or peers))
        else:
            vec = None if vectors is None else vectors[i]
            inj = inject(store, t.question, tasks.prompt(t), retrieval, node_id, t.domain, vec, environment)
            kept = [h for h in inj.hits if exclude is None or not exclude(h)]
            if len(kept) != len(inj.hits):
                own, peers = split_own(kept, node_id)
                inj = type(inj)(messages(tasks.prompt(t), own, peers), kept)
            chats.append(inj.chat)
            hits.append(inj.hits)
            injected.append(bool(inj.hits))
    out = llm.generate(chats, n=1, temperature=0.0, max_tokens=max_tokens, seed=0)
    texts = [c.texts[0] for c in out]
    correct = np.array([tasks.verify(t, r) >= 1.0 for t, r in zip(tasks.tasks, texts)], float)
    if record and store is not None:
        for h, ok in zip(hits, correct):
            record_on_members(store, h, bool(ok))
    return Run(correct, np.array([tasks.parsed(r) for r in texts]), np.array(injected, bool), texts, hits,
               sum(c.tokens for c in out), time.perf_counter() - t0)


def accuracy(llm: ChatLLM, tasks: TaskSet, store=None, samples: int = 1, temperature: float = 0.0,
             max_tokens: int = 128, seed: int = 0, retrieval: Retrieval = Retrieval()) -> tuple[np.ndarray, int]:
    """(per-task correctness, tokens spent) with greedy answers, lessons from ``store`` when given."""
    run = answer(llm, tasks, store, retrieval, max_tokens=max_tokens)
    return run.correct, run.tokens


@dataclass(frozen=True)
class EvalResult:
    without: Run
    with_: Run

    @property
    def n(self) -> int:
        return int(self.without.correct.size)

    @property
    def ci95(self) -> tuple[float, float]:
        """Interval of accuracy_with − accuracy_without."""
        return paired_bootstrap(self.with_.correct, self.without.correct)

    def to_dict(self) -> dict:
        r = lambda xs: [round(x, 4) for x in xs]  # noqa: E731
        return {"n_eval": self.n, "accuracy_without": round(self.without.accuracy, 4),
                "accuracy_with": round(self.with_.accuracy, 4), "ci95": r(self.ci95),
                "p_mcnemar": round(mcnemar(self.with_.correct, self.without.correct), 4),
                "wilson_without": r(self.without.wilson()), "wilson_with": r(self.with_.wilson()),
                "coverage": round(self.with_.coverage, 4),
                "parse_failures": {"without": self.without.parse_failures, "with": self.with_.parse_failures},
                "tokens": self.without.tokens + self.with_.tokens,
                "wall_s": round(self.without.wall_s + self.with_.wall_s, 1)}


def evaluate(llm: ChatLLM, tasks: TaskSet, store, max_tokens: int = 128, retrieval: Retrieval = Retrieval(),
             node_id: str | None = None, record: bool = True) -> EvalResult:
    """Held-out accuracy without and with the library's lessons, same tasks, greedy; records outcomes."""
    without = answer(llm, tasks, None, retrieval, max_tokens=max_tokens)
    with_ = answer(llm, tasks, store, retrieval, max_tokens=max_tokens, node_id=node_id, record=record)
    return EvalResult(without, with_)
