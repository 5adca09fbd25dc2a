"""What a search answers: `Hit`, one experience (a merged cluster's representative) and its score,
and `Hits`, a search's hits best first with what an empty answer needs to say why. One type from
the library to the node's API, MCP and the proxy (`dsonet.library.contract`), and one JSON shape
(`Hit.to_json`; what an agent reads of it, `Hit.summary`)."""

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
    # what an agent is shown of a hit, a subset of `to_json` (MCP's search tool declares its output from it)
    SUMMARY: ClassVar[dict[str, type]] = {"id": str, "text": str, "domain": str, "score": float, "scope": list,
                                          "fit": str}

    @property
    def ids(self) -> tuple[str, ...]:
        """Every experience this hit stands for: its merged members, or its own id when nothing merged."""
        return self.members or (self.experience.id,)

    def to_json(self) -> dict:
        """A hit's one JSON form, for the node's API and the CLI's --json: the experience's own fields
        (id, text, domain, confidence, provenance, scope), the score to 4 places, the ids merged into
        it, their signers and the fit. `from_json` reads it back."""
        return {**self.experience.to_dict(), "score": round(float(self.score), 4), "members": list(self.members),
                "sources": list(self.sources), "fit": self.fit}

    @classmethod
    def from_json(cls, data: dict) -> Hit:
        return cls(Experience.from_dict(data), float(data["score"]), tuple(data.get("members", ())),
                   tuple(data.get("sources", ())), data.get("fit", ""))

    def summary(self) -> dict:
        """`to_json` cut to `SUMMARY`: what an agent reads (no confidence, provenance, members or signers)."""
        full = self.to_json()
        return {name: full[name] for name in self.SUMMARY}


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
