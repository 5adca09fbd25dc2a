"""The Experience record: a short strategy ("When X, do Y") with its tags, scope and lineage.

An experience's id is the SHA-256 of its canonical content (normalised text and domain, and its
scope where it has one), so the same lesson learned twice, by two nodes in one environment, is one
experience: inserts are idempotent and replicas converge. Who learned it lives in ``provenance``,
which is not hashed; so does its evidence, where it was learned from agents' traffic: how many
episodes gave it and how many distinct agents (`dsonet.proxy.learning`).

A lesson's ``scope`` is the environment it was learned under: pins ``name==version``
of the distributions its text and code name, and of ``python``. It is signed with the lesson (it
is part of the id), so a lesson for NumPy 2.4 and the same words learned on NumPy 1.26 are two
lessons, each saying where it holds. A lesson without pins (every lesson from before) is taken to
hold everywhere, as it was. How a scope is judged against an asker's environment: `Scope.fit`.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass, field, fields, replace

from dsonet.errors import DsoError
from dsonet.scope import Scope

MAX_WORDS = 32  # training-free GRPO's bound on one experience (DESIGN.md)
MAX_TEXT_CHARS = 512  # 32 words of ordinary prose fit easily; bounds hostile payloads
MIN_LESSON_WORDS = 3  # "When x, do y" has four; "ok", "x" or "-" carries nothing an agent can act on
MAX_EVIDENCE = 10**9  # episodes behind one lesson: far past any fleet's traffic, and a bound on a hostile row's claim
_DOMAIN = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
_WORD = re.compile(r"[^\W\d_]")  # a word: a token with at least one letter (of any script)


class ExperienceError(DsoError, ValueError):
    """An experience with an invalid field."""


def normalise_text(text: str) -> str:
    return " ".join(text.split())


def experience_id(text: str, domain: str) -> str:
    """sha256 over the canonical content; the same text and domain always give the same id."""
    return _hash_id(normalise_text(text), domain)


def _hash_id(normalised_text: str, domain: str, scope: "Scope | None" = None) -> str:
    # an unscoped lesson keeps the id it had before scopes existed: old files and batches still match
    pins = f"\n{scope}" if scope else ""
    return hashlib.sha256(f"{domain}\n{normalised_text}{pins}".encode()).hexdigest()


@dataclass(frozen=True)
class Provenance:
    """Where an experience came from. Not part of its id, so evidence can grow on the lesson it counts for."""

    node_id: str = ""
    model: str = ""
    timestamp_ms: int = 0
    iteration: int = 0
    episodes: int = 0  # episodes of agents' traffic that gave the lesson; 0: not learned from traffic
    agents: int = 0  # distinct agents among them

    def __post_init__(self) -> None:
        check_evidence(self.episodes, self.agents)


@dataclass(frozen=True)
class Experience:
    text: str
    domain: str = "general"
    confidence: float = 0.5
    provenance: Provenance = field(default_factory=Provenance)
    scope: Scope = field(default_factory=Scope)  # where it holds; no pins: everywhere (hashed into the id)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", normalise_text(self.text) if isinstance(self.text, str) else self.text)
        validate(self)

    @property
    def id(self) -> str:
        # a SHA-256, asked for several times per experience while a batch is built or verified:
        # kept after the first time (by hand: functools.cached_property takes a lock on 3.11)
        cached = self.__dict__.get("_id")
        if cached is None:
            cached = _hash_id(self.text, self.domain, self.scope)  # the text is normalised on construction
            object.__setattr__(self, "_id", cached)  # not a field: no part of eq, hash, repr or asdict
        return cached

    def with_provenance(self, node_id: str, model: str = "", iteration: int = 0) -> "Experience":
        prov = Provenance(node_id, model, int(time.time() * 1000), iteration)
        return replace(self, provenance=prov)

    def to_dict(self) -> dict:
        return {"id": self.id, **asdict(self), "scope": self.scope.strings()}

    @classmethod
    def from_dict(cls, data: dict) -> "Experience":
        # a field a newer peer's provenance carries that this one does not know is left out, not an error
        prov = {k: v for k, v in (data.get("provenance") or {}).items() if k in _PROVENANCE_FIELDS}
        return cls(
            text=data["text"],
            domain=data.get("domain", "general"),
            confidence=float(data.get("confidence", 0.5)),
            provenance=Provenance(**prov),
            scope=Scope.parse(data.get("scope") or ()),
        )


_PROVENANCE_FIELDS = frozenset(f.name for f in fields(Provenance))


def check_lesson(text: str) -> None:
    """Refuse a text written here (add, edit, import) that cannot be a lesson. Not part of `validate`:
    a received batch is judged by DeltaSoup, and a library written before this rule still opens."""
    words = sum(1 for w in str(text).split() if _WORD.search(w))
    if words < MIN_LESSON_WORDS:
        raise ExperienceError(
            f"text: {normalise_text(str(text))[:40]!r} has {words} word(s) with letters; a lesson needs at least "
            f"{MIN_LESSON_WORDS}: a condition and what to do, e.g. 'When a ratio is given, write both parts as "
            "multiples of one unknown'")


def check_evidence(episodes: int, agents: int, within: str = "provenance.") -> None:
    """Refuse evidence counts that are not integers in [0, `MAX_EVIDENCE`], or more agents than episodes
    (each agent gave one at least); ``within``: the fields' prefix in the error."""
    for name, n in (("episodes", episodes), ("agents", agents)):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_EVIDENCE:
            raise ExperienceError(f"{within}{name}: {n!r:.40} must be an integer in [0, {MAX_EVIDENCE}]")
    if agents > episodes:
        raise ExperienceError(f"{within}agents: {agents} agents but {episodes} episodes; each agent gave one at least")


def validate(exp: Experience) -> None:
    if not isinstance(exp.text, str) or not exp.text:
        raise ExperienceError("text: must be a non-empty string")
    if len(exp.text) > MAX_TEXT_CHARS:
        raise ExperienceError(f"text: {len(exp.text)} characters, the limit is {MAX_TEXT_CHARS}; shorten it")
    words = exp.text.count(" ") + 1  # normalised on construction: single spaces between words
    if words > MAX_WORDS:
        raise ExperienceError(f"text: {words} words, the limit is {MAX_WORDS}; phrase it as 'When X, do Y'")
    if not isinstance(exp.domain, str) or len(exp.domain) > 64 or not _DOMAIN.match(exp.domain):
        raise ExperienceError(
            f"domain: {exp.domain!r} is not a dotted lower-case tag like 'math.geometry' (at most 64 characters)"
        )
    c = exp.confidence
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not (0.0 <= c <= 1.0):
        raise ExperienceError(f"confidence: {c!r} must be a number in [0, 1]")
    if not isinstance(exp.scope, Scope):
        raise ExperienceError(f"scope: {exp.scope!r:.60} is not a Scope; build one with Scope.parse(['numpy==2.4.6'])")
