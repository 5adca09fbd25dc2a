"""What an agent integration needs from dsonet: search with a retrieval id, add, outcome, stats.

The MCP server (`dsonet.mcp`) and the OpenAI-compatible proxy (`dsonet.proxy`) both talk to
one `Memory`: a local library file (`LocalMemory`) or a running node (`NodeMemory`, over the
node's HTTP API). A search returns a `Recall`: the hits and a retrieval id. An outcome names
that id rather than experience ids, so a caller can only vote on lessons it was actually given,
and a retrieval's outcome is recorded once.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dsonet.errors import DsoError
from dsonet.experience import Experience

MAX_PENDING = 10_000  # retrievals awaiting an outcome; the oldest are forgotten first


class RecallError(DsoError, ValueError):
    """A memory request that cannot be done as asked (unknown retrieval id, bad argument)."""


class UnknownRetrieval(RecallError):
    """An outcome for a retrieval id this memory did not issue, or whose outcome is already in."""


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
    retrieval_id: str
    lessons: list[Lesson]
    hits: list  # the library's `Hit`s, for the learn layer's renderers


class Memory(Protocol):
    def search(self, query: str, k: int = 5, min_similarity: float = 0.6, max_tokens: int = 2048,
               domain: str | None = None) -> Recall: ...

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience: ...

    def outcome(self, retrieval_id: str, helped: bool) -> int: ...

    def stats(self) -> dict: ...

    def close(self) -> None: ...


def _lessons(hits: list) -> list[Lesson]:
    return [Lesson(h.experience.id, h.experience.text, h.experience.domain, float(h.score),
                   tuple(h.members) or (h.experience.id,)) for h in hits]


class LocalMemory:
    """A library file in this process. Retrieval ids live in memory for the process's life
    (the last `MAX_PENDING` searches); one lock serialises library calls from server threads."""

    def __init__(self, library):
        self.library = library
        self._pending: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 5, min_similarity: float = 0.6, max_tokens: int = 2048,
               domain: str | None = None) -> Recall:
        with self._lock:
            hits = self.library.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens,
                                       domain=domain)
            lessons = _lessons(hits)
            rid = secrets.token_hex(12)
            if lessons:  # an empty retrieval has nothing to vote on
                self._pending[rid] = tuple(m for lesson in lessons for m in lesson.members)
                while len(self._pending) > MAX_PENDING:
                    self._pending.popitem(last=False)
        return Recall(rid, lessons, hits)

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience:
        with self._lock:
            return self.library.add(text, domain=domain, confidence=confidence)

    def outcome(self, retrieval_id: str, helped: bool) -> int:
        with self._lock:
            ids = self._pending.pop(retrieval_id, None)
            if ids is None:
                raise UnknownRetrieval(
                    f"retrieval_id {retrieval_id[:40]!r}: unknown or already recorded; send the id a search returned "
                    f"in this process (the last {MAX_PENDING} searches with lessons are kept), once")
            for exp_id in ids:
                self.library.record_outcome(exp_id, helped)
        return len(ids)

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

    def search(self, query: str, k: int = 5, min_similarity: float = 0.6, max_tokens: int = 2048,
               domain: str | None = None) -> Recall:
        rid, hits = self.client.recall(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens,
                                       domain=domain)
        return Recall(rid, _lessons(hits), hits)

    def add(self, text: str, domain: str = "general", confidence: float = 0.5) -> Experience:
        return self.client.add(text, domain, confidence)

    def outcome(self, retrieval_id: str, helped: bool) -> int:
        return self.client.outcome(retrieval_id, helped)

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
