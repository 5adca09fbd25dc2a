"""The store contract: what every user of a lesson store calls, typed once.

Three stores implement it: `Library` (a file in this process), `dsonet.network.client.NodeClient`
(a running node over its HTTP API) and the `dsonet.memory` classes (either of them behind one
lock, for servers). Its users: the learner (`dsonet.learn.operations`, which also edits lessons:
`LessonStore`), the MCP server, the OpenAI-compatible proxy and the LangChain retriever.

A search returns `Hits` (best first, each a `Hit`), with the threshold it applied, the best score
it saw, and a retrieval id: an outcome names that id rather than experience ids, so a caller can
only judge lessons it was given, once (`dsonet.library.retrievals`). One suite of tests holds every
store to it (tests/library/test_store_contract.py).
"""

from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable

from dsonet.experience import Experience, Provenance
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.hits import Hit, Hits
from dsonet.scope import Scope

__all__ = ["LessonStore", "RecordsOutcomes", "Store", "record_on_members"]


class Store(Protocol):
    def add(self, text: str, domain: str = "general", confidence: float = 0.5,
            tags: tuple[str, ...] = (), scope: Scope = Scope()) -> Experience:
        """Store one lesson ("When X, do Y") with the store's own ``tags`` (scopes such as agent:NAME,
        project:NAME; `dsonet.library.store.tags`) and the ``scope`` it holds in (`dsonet.scope`); returns it
        with its id."""

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None, tags: tuple[str, ...] = (), environment: Scope | None = None) -> Hits:
        """The lessons for ``query`` under the retrieval policy (``min_similarity`` None: the threshold
        calibrated for the store's space), of those carrying every one of ``tags``, with a retrieval id
        (None when nothing passed); in the asker's ``environment``, those whose scope contradicts it
        held back (`Hits.held_back`)."""

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None,
                environment: Scope | None = None) -> int:
        """Whether the lessons of a search helped, all together (``helped``) or each (``lessons``: id ->
        helped), once per retrieval id; returns how many lessons were judged. ``environment``: where the
        lessons were used, for a search made without one (a search's own environment wins)."""

    def add_evidence(self, exp_id: str, episodes: int = 1, agents: int = 0) -> Experience | None:
        """More evidence for a lesson the store holds as its own, learned from agents' traffic: ``episodes`` more
        episodes gave it, ``agents`` more distinct agents (`Provenance`); a node publishes it again with them.
        Returns the lesson as it now stands, None where the store holds no own copy of it."""

    def delete(self, exp_id: str) -> bool:
        """Delete a lesson; returns whether it was held."""

    def all(self) -> list[Experience]:
        """Every lesson held (a node's: at most 10,000)."""

    def stats(self) -> dict:
        """Counts and profile of the store."""

    def close(self) -> None: ...


class LessonStore(Store, Protocol):
    """What the learner also needs: lessons read and edited by id (UPDATE keeps the lineage)."""

    def add(self, text: str, domain: str = "general", confidence: float = 0.5, tags: tuple[str, ...] = (),
            scope: Scope = Scope(), provenance: Provenance | None = None) -> Experience:
        """`Store.add`, the lesson's provenance given (a remote node records itself instead)."""

    def get(self, exp_id: str) -> Experience | None: ...

    def update(self, exp_id: str, text: str) -> Experience: ...


@runtime_checkable
class RecordsOutcomes(Protocol):
    """A store that takes one use of a lesson by its id (a library file, whose learner holds no retrieval
    ids for its own rollouts); a node's client records outcomes through retrievals instead."""

    def record_outcome(self, exp_id: str, helped: bool, environment: Scope | None = None) -> None: ...


def record_on_members(store: RecordsOutcomes, hits: Iterable[Hit], helped: bool,
                      environment: Scope | None = None) -> int:
    """One use of each hit's lessons: counted on every experience merged into it (`Hit.ids`), since the
    agent was shown the cluster, not one row; in the asker's ``environment``. Returns how many were counted."""
    n = 0
    for hit in hits:
        for exp_id in hit.ids:
            store.record_outcome(exp_id, helped, environment)
            n += 1
    return n
