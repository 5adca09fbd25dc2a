"""Using experiences: `ask` one question, and `evaluate` accuracy with and without them.

The evaluation is paired: the same held-out tasks, the same seeds and the same number of
samples, once with the retrieved experiences injected and once without; only the prompt
differs. The confidence interval is on the paired difference in accuracy (bootstrap over
tasks), and each accuracy also gets a Wilson interval. A sample counts as correct when the
verifier gives it full reward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dsonet.learn.context import Retrieval, with_experiences
from dsonet.learn.llm import ChatLLM, user
from dsonet.learn.tasks import TaskSet


@dataclass(frozen=True)
class Answer:
    text: str
    prompt: str
    hits: list
    tokens: int


def ask(llm: ChatLLM, store, question: str, retrieval: Retrieval = Retrieval(), max_tokens: int = 256,
        temperature: float = 0.0, seed: int | None = 0) -> Answer:
    """Retrieve experiences for ``question``, inject them, and generate one answer."""
    prompt, hits = with_experiences(store, question, question, retrieval, getattr(llm, "tokenizer", None))
    out = llm.generate([user(prompt)], n=1, temperature=temperature, max_tokens=max_tokens, seed=seed)[0]
    return Answer(out.texts[0], prompt, hits, out.tokens)


def wilson(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sound at 0% and 100%, unlike p ± z·se)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def paired_bootstrap(with_: np.ndarray, without: np.ndarray, resamples: int = 10_000,
                     seed: int = 0) -> tuple[float, float]:
    """95% interval of mean(with_ − without), resampling tasks (the pairs stay together)."""
    diff = np.asarray(with_, float) - np.asarray(without, float)  # (n,)
    if diff.size == 0:
        return 0.0, 0.0
    idx = np.random.default_rng(seed).integers(0, diff.size, size=(resamples, diff.size))  # (B, n)
    means = diff[idx].mean(axis=1)  # (B,)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@dataclass(frozen=True)
class EvalResult:
    n: int
    samples: int
    correct_without: np.ndarray  # (n,) fraction of each task's samples that were correct
    correct_with: np.ndarray
    tokens: int
    wall_s: float

    @property
    def accuracy_without(self) -> float:
        return float(self.correct_without.mean()) if self.n else 0.0

    @property
    def accuracy_with(self) -> float:
        return float(self.correct_with.mean()) if self.n else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        """Interval of accuracy_with − accuracy_without."""
        return paired_bootstrap(self.correct_with, self.correct_without)

    def wilson_without(self) -> tuple[float, float]:
        return wilson(self.correct_without.sum() * self.samples, self.n * self.samples)

    def wilson_with(self) -> tuple[float, float]:
        return wilson(self.correct_with.sum() * self.samples, self.n * self.samples)

    def to_dict(self) -> dict:
        return {"n_eval": self.n, "samples": self.samples, "accuracy_without": round(self.accuracy_without, 4),
                "accuracy_with": round(self.accuracy_with, 4), "ci95": [round(x, 4) for x in self.ci95],
                "wilson_without": [round(x, 4) for x in self.wilson_without()],
                "wilson_with": [round(x, 4) for x in self.wilson_with()], "tokens": self.tokens,
                "wall_s": round(self.wall_s, 1)}


def accuracy(llm: ChatLLM, tasks: TaskSet, store=None, samples: int = 1, temperature: float = 0.0,
             max_tokens: int = 128, seed: int = 0, retrieval: Retrieval = Retrieval()) -> tuple[np.ndarray, int]:
    """(per-task fraction correct, tokens spent), with experiences from ``store`` when given."""
    tokenizer = getattr(llm, "tokenizer", None)
    prompts = [with_experiences(store, t.question, tasks.prompt(t), retrieval, tokenizer)[0] for t in tasks.tasks]
    out = llm.generate([user(p) for p in prompts], n=samples, temperature=temperature, max_tokens=max_tokens,
                       seed=seed)
    correct = np.array([np.mean([tasks.verify(t, r) >= 1.0 for r in c.texts]) for t, c in zip(tasks.tasks, out)])
    return correct, sum(c.tokens for c in out)


def evaluate(llm: ChatLLM, tasks: TaskSet, store, samples: int = 1, temperature: float = 0.0,
             max_tokens: int = 128, seed: int = 0, retrieval: Retrieval = Retrieval(),
             baseline: np.ndarray | None = None) -> EvalResult:
    """Accuracy without and with experiences on the same tasks and seeds. Pass ``baseline`` (an
    earlier `accuracy` without experiences on the same settings) to skip re-running it."""
    t0 = time.perf_counter()
    tokens = 0
    if baseline is None:
        baseline, tokens = accuracy(llm, tasks, None, samples, temperature, max_tokens, seed, retrieval)
    with_, spent = accuracy(llm, tasks, store, samples, temperature, max_tokens, seed, retrieval)
    return EvalResult(len(tasks.tasks), samples, baseline, with_, tokens + spent, time.perf_counter() - t0)
