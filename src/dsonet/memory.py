"""What an agent integration needs from dsonet: search with a retrieval id, add, outcome, stats.

The MCP server (`dsonet.mcp`) and the OpenAI-compatible proxy (`dsonet.proxy`) both talk to
one `Memory`: a local library file (`LocalMemory`) or a running node (`NodeMemory`, over the
node's HTTP API, where the node issues the ids and feeds outcomes to its peers' reputation). A
search returns a `Recall`: the hits, a retrieval id (None when nothing was found), and the
threshold applied with the best score seen, so an empty answer can say how near it came. An
outcome names the retrieval id rather than experience ids, so a caller can only vote on lessons
it was actually given, once (`dsonet.library.retrievals`). ``min_similarity`` left None is the
threshold calibrated for the library's space (`dsonet.library.policy.default_min_similarity`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dsonet.errors import DsoError
from dsonet.experience import Experience
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import Retrievals, UnknownRetrieval

__all__ = ["LocalMemory", "Memory", "NodeMemory", "Recall", "RecallError", "UnknownRetrieval", "open_memory"]


class RecallError(DsoError, ValueError):
    """A memory that cannot be opened as asked."""


@dataclass(frozen=True)
class Lesson:
    id: str
    text: str
    domain: str
    score: float
    members: tuple[str, ...]  # every experience merged into this lesson: the outcome is recorded on each

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "domain": self.domain, "score": round(self.score, 4)}


@dataclass(frozen=True)
class Recall:
    retrieval_id: str | None  # None: nothing found, nothing to report an outcome on
    lessons: list[Lesson]
    hits: list  # the library's `Hits`, for the learn layer's renderers

    @property
    def threshold(self) -> float:
        """The cosine every lesson had to reach."""
        return self.hits.threshold

    @property
    def best_score(self) -> float | None:
        """The best score the search saw, above the threshold or not (None: nothing to score)."""
        return self.hits.best_score


class Memory(Protocol):
    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None) -> Recall: ...

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience: ...

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None) -> int: ...

    def stats(self) -> dict: ...

    def close(self) -> None: ...


def _lessons(hits: list) -> list[Lesson]:
    return [Lesson(h.experience.id, h.experience.text, h.experience.domain, float(h.score),
                   tuple(h.members) or (h.experience.id,)) for h in hits]


def _verdicts(helped: bool | None, lessons: dict[str, bool] | None) -> dict[str, bool] | None:
    """``lessons`` checked (None: every lesson of the retrieval gets ``helped``)."""
    if (helped is None) == (lessons is None):
        raise RecallError("outcome: give helped (every lesson of the retrieval) or lessons (id -> helped), one of them")
    if lessons is not None and (not lessons or not all(isinstance(v, bool) for v in lessons.values())):
        raise RecallError("lessons: give at least one {experience id: true|false}")
    return lessons


class LocalMemory:
    """A library file in this process. Retrieval ids live in memory for the process's life (the
    library's `Retrievals`: the last 10,000 searches with lessons); one lock serialises library
    calls from server threads."""

    def __init__(self, library):
        self.library = library
        self.retrievals = Retrievals()
        self._lock = threading.Lock()

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None) -> Recall:
        with self._lock:
            hits = self.library.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens,
                                       domain=domain)
        return Recall(self.retrievals.issue(hits), _lessons(hits), hits)

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience:
        with self._lock:
            return self.library.add(text, domain=domain, confidence=confidence)

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None) -> int:
        """Whether the lessons of a retrieval helped, all together (``helped``) or each (``lessons``: id ->
        helped; a lesson not named gets no outcome), counted on every experience merged into each;
        returns how many lessons were judged. Raises `UnknownRetrieval` for an id this memory did not
        issue or whose outcome is in already, `RecallError` for a lesson the retrieval did not give."""
        verdicts = _verdicts(helped, lessons)
        try:
            hits = self.retrievals.take(retrieval_id, lessons or ())
        except ValueError as exc:  # a lesson it did not give (the retrieval is kept for a corrected report)
            raise RecallError(str(exc)) from None
        judged = [lesson for lesson in _lessons(hits) if verdicts is None or lesson.id in verdicts]
        with self._lock:
            for lesson in judged:
                for exp_id in lesson.members:
                    self.library.record_outcome(exp_id, helped if verdicts is None else verdicts[lesson.id])
        return len(judged)

    def stats(self) -> dict:
        with self._lock:
            return self.library.stats()

    def close(self) -> None:
        self.library.close()


class NodeMemory:
    """A running node over its HTTP API (`dso node start`): the node issues the retrieval ids and
    records outcomes itself, so they reach the source peers' reputation."""

    def __init__(self, client):
        self.client = client

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None) -> Recall:
        rid, hits = self.client.recall(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens,
                                       domain=domain)
        return Recall(rid, _lessons(hits), hits)

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience:
        return self.client.add(text, domain, confidence)

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None) -> int:
        verdicts = _verdicts(helped, lessons)
        return self.client.outcome(retrieval_id, helped if verdicts is None else None, verdicts)

    def stats(self) -> dict:
        return self.client.stats()

    def close(self) -> None:
        self.client.close()


def open_memory(db: Path | None = None, node: str | None = None, token: str | None = None,
                encoder: str | None = None, timeout_s: float = 30.0) -> Memory:
    """A node's memory when ``node`` (its URL) is given, else the library file ``db``.
    ``encoder``: an encoder spec for the local library (default: the file's own, or the network default)."""
    if node:
        from dsonet.network.client import NodeClient

        return NodeMemory(NodeClient(node, token=token, timeout_s=timeout_s))
    if db is None:
        raise RecallError("no library: give --db PATH (or set DSONET_DB), or --node URL")
    from dsonet.library import Library

    enc = None
    if encoder and encoder != "default":
        from dsonet.encoders.registry import load_encoder

        enc = load_encoder(encoder)
    return LocalMemory(Library(Path(db).expanduser(), encoder=enc))
