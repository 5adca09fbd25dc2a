"""The store an agent integration talks to: a library file or a running node, behind one lock.

The MCP server (`dsonet.mcp`), the OpenAI-compatible proxy (`dsonet.proxy`) and the LangChain
retriever talk to one `dsonet.library.contract.Store`: a local library file (`LocalMemory`, whose
library issues the retrieval ids; one lock serialises the calls of server threads) or a running node
(`dsonet.network.client.NodeClient`, over the node's HTTP API, where the node issues the ids, feeds
outcomes to its peers' reputation, and a delete is its signed tombstone, sent to its peers too). A search returns the
library's `Hits`: the lessons, their retrieval id (None when nothing was found), and the threshold
applied with the best score seen, so an empty answer can say how near it came. An outcome names
the retrieval id rather than experience ids, so a caller can only vote on lessons it was actually
given, once (`dsonet.library.retrievals`). ``min_similarity`` left None is the threshold
calibrated for the library's space (`dsonet.library.policy.default_min_similarity`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from dsonet.encoders.registry import load_encoder
from dsonet.errors import DsoError
from dsonet.experience import Experience
from dsonet.library import Hits, Library
from dsonet.library.contract import Store
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import UnknownRetrieval
from dsonet.network.client import NodeClient
from dsonet.scope import Scope

__all__ = ["LocalMemory", "RecallError", "UnknownRetrieval", "open_memory"]


class RecallError(DsoError, ValueError):
    """A memory that cannot be opened as asked."""


class LocalMemory:
    """A library file in this process (its retrieval ids live for the process's life: the last
    10,000 searches with lessons); one lock serialises library calls from server threads."""

    def __init__(self, library):
        self.library = library
        self._lock = threading.Lock()

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None, tags: tuple[str, ...] = (), environment: Scope | None = None) -> Hits:
        with self._lock:
            return self.library.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens, domain=domain,
                                       tags=tags, environment=environment)

    def add(self, text: str, domain: str = "general", confidence: float = 0.5,
            tags: tuple[str, ...] = (), scope: Scope = Scope()) -> Experience:
        with self._lock:
            return self.library.add(text, domain=domain, confidence=confidence, tags=tags, scope=scope)

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None,
                environment: Scope | None = None) -> int:
        """`Library.outcome`: raises `UnknownRetrieval` for an id this memory did not issue or whose
        outcome is in already, `OutcomeError` for a lesson the retrieval did not give."""
        with self._lock:
            return self.library.outcome(retrieval_id, helped, lessons, environment)

    def add_evidence(self, exp_id: str, episodes: int = 1, agents: int = 0) -> Experience | None:
        with self._lock:
            return self.library.add_evidence(exp_id, episodes, agents)

    def delete(self, exp_id: str) -> bool:
        with self._lock:
            return self.library.delete(exp_id)

    def all(self) -> list[Experience]:
        with self._lock:
            return self.library.all()

    def stats(self) -> dict:
        with self._lock:
            return self.library.stats()

    def close(self) -> None:
        self.library.close()


def open_memory(db: Path | None = None, node: str | None = None, token: str | None = None,
                encoder: str | None = None, timeout_s: float = 30.0, create: bool = True) -> Store:
    """A node's memory when ``node`` (its URL) is given, else the library file ``db``.
    ``encoder``: an encoder spec for the local library (default: the file's own, or the network default).
    ``create``: False refuses a ``db`` that holds no library yet (a memory that only reads: the proxy)."""
    if node:
        return NodeClient(node, token=token, timeout_s=timeout_s)
    if db is None:
        raise RecallError("no library: give --db PATH (or set DSONET_DB), or --node URL")
    enc = None
    if encoder and encoder != "default":
        enc = load_encoder(encoder)
    return LocalMemory(Library(Path(db).expanduser(), encoder=enc, create=create))
