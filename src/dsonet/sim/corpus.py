"""The benchmark's real text: GSM8K solution sentences as honest experiences, questions as queries.

Item i's relevant experiences are the sentences of its own solution, so relevance is known
without labelling. Sentences that an `Experience` cannot hold (over 32 words) are left out;
an item keeps its place only if at least one sentence remains.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dsonet.data import gsm8k
from dsonet.encoders.cache import cached_encode
from dsonet.experience import MAX_TEXT_CHARS, MAX_WORDS

DOMAIN = "math.gsm8k"


@dataclass(frozen=True)
class Corpus:
    questions: tuple[str, ...]  # one per item
    docs: tuple[str, ...]  # honest experience texts, every item's sentences in order
    doc_item: np.ndarray  # (n_docs,) int: the item each doc belongs to
    q_vectors: np.ndarray  # (n_items, dim) float32, queries encoded as "query"
    d_vectors: np.ndarray  # (n_docs, dim) float32, docs encoded as "document"


def fits(text: str) -> bool:
    return len(text.split()) <= MAX_WORDS and len(text) <= MAX_TEXT_CHARS


@lru_cache(maxsize=1)
def texts() -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    """(questions, docs, doc_item) for every GSM8K item with at least one usable sentence."""
    questions, docs, owner = [], [], []
    for item in gsm8k():
        steps = [s for s in dict.fromkeys(item.steps) if fits(s)]
        if not steps:
            continue
        docs += steps
        owner += [len(questions)] * len(steps)
        questions.append(item.question)
    return tuple(questions), tuple(docs), np.asarray(owner, dtype=np.int64)


def load(encoder) -> Corpus:
    """Encode (once, through the shared on-disk cache) and return the corpus."""
    questions, docs, owner = texts()
    return Corpus(
        questions, docs, owner,
        cached_encode(encoder, list(questions), "query"),
        cached_encode(encoder, list(docs), "document"),
    )
