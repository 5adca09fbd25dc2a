"""What a search answers: `Hit`, one experience (a merged cluster's representative) and its score,
and `Hits`, a search's hits best first with what an empty answer needs to say why. One type from
the library to the node's API, MCP and the proxy (`dsonet.library.contract`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dsonet.experience import Experience
from dsonet.library.policy import RetrievalPolicy, estimate_tokens
from dsonet.scope import Scope

__all__ = ["HeldBack", "Hit", "Hits"]


@dataclass(frozen=True)
class Hit:
    experience: Experience  # the cluster's representative (see `dsonet.library.view.merge`)
    score: float  # cosine of the query and the cluster's vector; in a text search, its second stage's (`rescored`)
    members: tuple[str, ...] = ()  # ids of every experience merged into this one (provenance kept)
    sources: tuple[str, ...] = ()  # signers of the merged rows: whose reputation an outcome moves
    fit: str = ""  # against the asker's environment: "fits" or "unknown" (`dsonet.scope`); "" none was given
    # what an agent is shown of a hit (MCP's search tool declares its output from these; the node's
    # API sends every field)
    SUMMARY: ClassVar[dict[str, type]] = {"id": str, "text": str, "domain": str, "score": float, "scope": list,
                                          "fit": str}

    def summary(self) -> dict:
        """`SUMMARY`: the experience's id, text, domain and scope, the score to 4 places, and its fit."""
        e = self.experience
        return {"id": e.id, "text": e.text, "domain": e.domain, "score": round(float(self.score), 4),
                "scope": e.scope.strings(), "fit": self.fit}


@dataclass(frozen=True)
class HeldBack:
    """A lesson a search found but did not return: its scope contradicts the asker's environment."""

    id: str
    text: str
    reason: str  # which pin, learned vs here: "numpy 2.4.6 learned, 1.26.4 here"

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "reason": self.reason}


class Hits(list):
    """A search's hits, best first, with what an empty (or short) answer needs to say why: the
    threshold the search applied and the best score it saw, passed or not (None: nothing to
    score); and the retrieval id its outcome is reported under (None: nothing to judge, or a
    search by vector, which issues none). A list, so every caller that iterates hits reads it unchanged.
    ``environment``: the asker's, where one was given (its outcomes are counted there), and
    ``held_back``: the lessons it kept out because their scope contradicts it."""

    def __init__(self, hits=(), threshold: float | None = None, best_score: float | None = None,
                 retrieval_id: str | None = None, environment: Scope | None = None,
                 held_back: tuple[HeldBack, ...] = ()):
        super().__init__(hits)
        self.threshold = threshold
        self.best_score = best_score
        self.retrieval_id = retrieval_id
        self.environment = environment
        self.held_back = held_back

    def __repr__(self) -> str:
        return (f"Hits({list.__repr__(self)}, threshold={self.threshold}, best_score={self.best_score}, "
                f"retrieval_id={self.retrieval_id}, held_back={list(self.held_back)})")

    def offer(self, hit: Hit, score: float, policy: RetrievalPolicy) -> bool:
        """Append ``hit`` at ``score`` where ``policy`` admits it; False once nothing more can be
        taken (the token budget or k reached), so a walk down the candidates stops."""
        if not policy.admits(score):
            return True
        if not policy.fits(sum(estimate_tokens(h.experience.text) for h in self), hit.experience.text):
            return False
        self.append(Hit(hit.experience, score, hit.members, hit.sources, hit.fit))
        return len(self) < policy.k
