"""Library operations ADD / UPDATE / DELETE / NONE: deciding them and applying them safely.

For each proposed experience the learner looks up the similar experiences already in the
library. With none similar, the only sensible choices are ADD or NONE, and a proposal that
survived parsing is worth adding, so no LLM call is spent. Otherwise the LLM sees the
similar ones under short ids (E1, E2 ... — small models copy those reliably, not sha256
hex) and picks an operation. Whatever comes back is validated before it touches the
library: an unknown id, an over-long text or an unknown op is logged and skipped.

Duplicate ADDs in one batch are merged (same normalised text: one ADD, highest
confidence), and an ADD whose nearest library entry is at cosine >= ``DUPLICATE_COSINE``
(DeltaSoup's θ_dup) is applied as NONE, so a library never holds the same lesson twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Callable, Literal, Sequence

from dsonet.experience import MAX_WORDS, Experience, Provenance, normalise_text
from dsonet.learn import parse
from dsonet.library import Library
from dsonet.library.contract import LessonStore
from dsonet.scope import Scope

Op = Literal["ADD", "UPDATE", "DELETE", "NONE"]
OPS = ("ADD", "UPDATE", "DELETE", "NONE")
DUPLICATE_COSINE = 0.95


@dataclass(frozen=True)
class Proposal:
    text: str
    domain: str
    confidence: float
    source: str = ""  # the task id that taught it


@dataclass(frozen=True)
class Operation:
    op: Op
    proposal: Proposal
    target: str | None = None  # the experience id an UPDATE/DELETE acts on
    text: str | None = None  # the new text of an UPDATE


@dataclass(frozen=True)
class Applied:
    operation: Operation
    applied: bool
    detail: str  # the resulting experience id, or why nothing changed


def confidence_from_gap(best: float, worst: float) -> float:
    """Trust a lesson more the wider the reward gap it was learned from; one group never gives
    certainty, so the range is [0.5, 0.95]."""
    gap = min(max(best - worst, 0.0), 1.0)
    return round(0.5 + 0.45 * gap, 4)


def listing(similar: Sequence[Experience]) -> tuple[str, dict[str, str]]:
    """The similar experiences as 'E1: text' lines, and the map from short id to real id."""
    ids = {f"E{i + 1}": exp.id for i, exp in enumerate(similar)}
    lines = "\n".join(f"{short}: {exp.text}" for short, exp in zip(ids, similar))
    return lines, ids


def decide(proposal: Proposal, reply: str, ids: dict[str, str]) -> tuple[Operation | None, str]:
    """The operation an LLM reply asks for, checked against the ids it was shown; (None, why) if invalid."""
    raw, why = parse.operation(reply)
    if raw is None:
        return None, why
    op = raw["op"]
    if op not in OPS:
        return None, f"op {op!r} is not one of {OPS}"
    if op in ("ADD", "NONE"):
        return Operation(op, proposal), ""
    short = raw.get("id", "").strip().upper()
    if short not in ids:
        return None, f"{op} names id {raw.get('id')!r}, but only {sorted(ids)} were shown"
    if op == "DELETE":
        return Operation(op, proposal, target=ids[short]), ""
    text = normalise_text(raw.get("text") or proposal.text)
    if len(text.split()) > MAX_WORDS:
        return None, f"UPDATE text has {len(text.split())} words > {MAX_WORDS}"
    if not parse.experiences(text, 1).items:  # the prompt's own "When ..., ..." echoed back
        return None, f"UPDATE text {text!r} is not a 'When X, do Y' lesson"
    return Operation(op, proposal, target=ids[short], text=text), ""


def decide_batch(proposals: Sequence[Proposal], reply: str, ids: dict[str, str]) -> tuple[list[Operation], list[str]]:
    """The operations a batch-update reply asks for, one per candidate, each checked like `decide`;
    a candidate the reply leaves out or garbles gets no operation and a reason."""
    raw, skipped = parse.batch_operations(reply, len(proposals))
    ops = []
    for i, p in enumerate(proposals):
        if i not in raw:
            skipped.append(f"C{i + 1}: no operation in the reply")
            continue
        entry = raw[i]
        op, why = decide(p, json.dumps(entry), ids)
        if op is None:
            skipped.append(f"C{i + 1}: {why}")
        else:
            ops.append(op)
    return ops, skipped


def merge_duplicate_adds(operations: Sequence[Operation]) -> list[Operation]:
    """One ADD per distinct (domain, normalised text), keeping the highest confidence; order kept."""
    best: dict[tuple[str, str], Operation] = {}
    order: list[Operation | tuple[str, str]] = []
    for op in operations:
        if op.op != "ADD":
            order.append(op)
            continue
        key = (op.proposal.domain, normalise_text(op.proposal.text).casefold().rstrip("."))
        if key not in best:
            order.append(key)
            best[key] = op
        elif op.proposal.confidence > best[key].proposal.confidence:
            best[key] = op
    return [best[o] if isinstance(o, tuple) else o for o in order]


def apply(store: LessonStore, operations: Sequence[Operation], provenance=None,
          scope_of: Callable[[str], Scope] | None = None) -> list[Applied]:
    """Apply validated operations in order; each either changes the library or says why not.
    ``scope_of``: a new lesson's scope from its text (the environment the learner practised in)."""
    results = []
    for op in merge_duplicate_adds(operations):
        p = op.proposal
        if op.op == "NONE":
            results.append(Applied(op, False, "NONE"))
        elif op.op == "ADD":
            # a library in this process encodes the lesson once, for the duplicate check and the ADD;
            # a remote store (a node) encodes it itself
            vector = store.encoder.encode([p.text], kind="document")[0] if isinstance(store, Library) else None
            near = store.search(p.text, k=1, min_similarity=DUPLICATE_COSINE, domain=p.domain) if vector is None \
                else store.search_vector(vector, 1, DUPLICATE_COSINE, p.domain)
            if near:
                results.append(Applied(replace(op, op="NONE"), False, f"duplicate of {near[0].experience.id[:12]}"))
                continue
            scope = scope_of(p.text) if scope_of else Scope()
            if vector is None:
                exp = store.add(p.text, domain=p.domain, confidence=p.confidence, scope=scope, provenance=provenance)
            else:
                prov = provenance or Provenance(timestamp_ms=int(time.time() * 1000))
                exp = Experience(p.text, p.domain, p.confidence, prov, scope)
                store.add_vectors([exp], vector[None, :])
            results.append(Applied(op, True, exp.id))
        elif store.get(op.target) is None:  # an earlier operation in this batch removed it
            results.append(Applied(op, False, f"{op.target[:12]} no longer exists"))
        elif op.op == "DELETE":
            results.append(Applied(op, store.delete(op.target), op.target))
        else:
            results.append(Applied(op, True, store.update(op.target, op.text).id))
    return results

