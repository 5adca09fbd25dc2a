"""The attacks on trust (issue 24) for `dsonet.bench.node_attacks`: each a `Plan` the node reads.

- sleeper: a key earns by volume, then lies. Five honest batches of 2 rows (the volume that used
  to lift a fresh key to 0.705, past `trusted`), then one batch of 990 rows: 980 honest and 10 whose
  code is a common question's code (one the searching clients ask) under the attacker's text. Its
  history gets no helpful outcome: the target is 0 lying rows admitted after any amount of honest
  history without one. ``lying_top_hits``: of those 10 questions, how many find a lying row first.
  Its batch comes alone in its round, after the honest peers' (the share cap of a crowded round
  would otherwise drop most of its rows, lies or not, by chance).
- eviction (untrusted), eviction (volume-trusted): a flood of rows at confidence 1.0 (from a fresh
  key; from a key with six honest batches first) against a library scaled down to hold the honest
  rows plus `EVICTION_ROOM`, while four honest newcomers (keys without outcomes) send 10 rows each.
  Before issue 24 the fresh key's flood evicted the newcomers' rows (40 of 40 at a capacity of 600),
  the volume-trusted key's, 580 honest rows. The flood's batch holds 1,000 rows less its history,
  a new key's hourly budget, and comes alone in its round, after the newcomers' rows are stored.
- reference shift: a copier's ~100 rows (six batches of copies of honest sentences) are all the
  node holds; then an honest node sends lone batches on another topic (sentences lifted into
  another subspace), each alone in its round. Before, six batches made the copier trusted, its
  rows the reference, and 7 of 8 lone batches were refused, each lowering the honest node's
  reputation. No honest warm-up here: the copier's rows are the only ones a reference could take.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EVICTION_ROOM = 100  # rows of the scaled-down library beyond the honest rows (and the flooder's history)
NEWCOMERS, NEWCOMER_ROWS = 4, 10
SLEEPER_HISTORY, SLEEPER_LIES = 5, 10
COPIER_BATCHES, COPIER_ROWS = 6, 17
LONE_BATCHES = 8


@dataclass
class Plan:
    """What one attack sends, and what the bench reads off the node afterwards."""

    attackers: list  # identities
    hostile: list[bytes]  # published during the attack
    history: list[bytes] = field(default_factory=list)  # the attackers' batches sent before it, with the warm-up
    tombstones: list[bytes] = field(default_factory=list)
    honest: list[tuple[bytes, set]] = field(default_factory=list)  # more honest batches during it, with their rows
    honest_keys: set = field(default_factory=set)  # their signers (beside the twelve honest peers)
    lying: set = field(default_factory=set)  # (id, signer) rows that lie
    lures: np.ndarray | None = None  # (len(lying), d): the questions the lying rows aim at
    capacity: int | None = None  # None: the node's default
    warm_up: bool = True  # the twelve honest peers' batches and outcomes first
    lone: bool = False  # each message alone in its round
    in_order: bool = False  # published in the order given, not shuffled
    victim_key: tuple[str, str] | None = None


def _docs(deal: np.ndarray, start: int, n: int) -> list[int]:
    return deal[start : start + n].tolist()


def _honest_batches(bench, identity, docs: list[int], per_batch: int, space: int = 0) -> list[tuple[bytes, set]]:
    from dsonet.experience import Experience
    from dsonet.sim.corpus import DOMAIN

    out = []
    for start in range(0, len(docs), per_batch):
        mine = docs[start : start + per_batch]
        texts = [bench.encoder.learn(bench.docs[i], i, space=space) for i in mine]
        out.append((bench.batch(identity, [(i, -1) for i in mine], texts, space=space),
                    {(Experience(t, DOMAIN).id, identity.node_id) for t in texts}))
    return out


def sleeper(bench, sizes, deal: np.ndarray, free: int) -> Plan:
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity
    from dsonet.sim.corpus import DOMAIN

    key = NodeIdentity.from_seed(b"sleeper")
    history = [p for p, _ in _honest_batches(bench, key, _docs(deal, free, 2 * SLEEPER_HISTORY), 2)]
    honest_docs = _docs(deal, free + 2 * SLEEPER_HISTORY, sizes.volume_rows - 2 * SLEEPER_HISTORY - SLEEPER_LIES)
    lures = bench.queries[:SLEEPER_LIES]  # questions the searching clients ask
    lie_texts = [bench.encoder.learn(f"{bench.docs[i]} (the sleeper's {j})", int(i))
                 for j, i in enumerate(bench.short[:SLEEPER_LIES])]  # its text encodes a sentence, its code a question
    texts = [bench.encoder.learn(bench.docs[i], i) for i in honest_docs] + lie_texts
    vectors = np.concatenate([bench.encoder.vectors([(i, -1) for i in honest_docs]), lures])
    hostile = bench.signed(key, vectors, texts, confidence=1.0)
    lying = {(Experience(t, DOMAIN).id, key.node_id) for t in lie_texts}
    return Plan([key], [hostile], history=history, lying=lying, lures=lures, lone=True, in_order=True)


def eviction(bench, sizes, deal: np.ndarray, free: int, honest_rows: int, with_history: bool) -> Plan:
    from dsonet.identity import NodeIdentity

    key = NodeIdentity.from_seed(b"evict-volume-trusted" if with_history else b"evict-untrusted")
    newcomers = [NodeIdentity.from_seed(f"evict-newcomer-{i}".encode()) for i in range(NEWCOMERS)]
    honest = [b for i, n in enumerate(newcomers)
              for b in _honest_batches(bench, n, _docs(deal, free + i * NEWCOMER_ROWS, NEWCOMER_ROWS), NEWCOMER_ROWS)]
    start = free + NEWCOMERS * NEWCOMER_ROWS
    history = [p for p, _ in _honest_batches(bench, key, _docs(deal, start, 12), 2)] if with_history else []
    flood = bench.hostile(key, sizes.volume_rows - 2 * len(history), "evict")
    capacity = honest_rows + NEWCOMERS * NEWCOMER_ROWS + 2 * len(history) + EVICTION_ROOM
    return Plan([key], [flood], history=history, honest=honest, honest_keys={n.node_id for n in newcomers},
                capacity=capacity, lone=True, in_order=True)


def reference_shift(bench, sizes, deal: np.ndarray) -> Plan:
    from dsonet.identity import NodeIdentity

    copier, author = NodeIdentity.from_seed(b"ref-copier"), NodeIdentity.from_seed(b"ref-honest-author")
    history = [p for p, _ in _honest_batches(bench, copier, _docs(deal, 0, COPIER_BATCHES * COPIER_ROWS),
                                             COPIER_ROWS)]
    lone = _honest_batches(bench, author, _docs(deal, COPIER_BATCHES * COPIER_ROWS, LONE_BATCHES * sizes.honest_rows),
                           sizes.honest_rows, space=1)
    return Plan([copier], [], history=history, honest=lone, honest_keys={author.node_id}, warm_up=False, lone=True,
                in_order=True)


TRUST_ATTACKS = ("sleeper", "eviction (untrusted)", "eviction (volume-trusted)", "reference shift")


def plan(name: str, bench, sizes, deal: np.ndarray, free: int, honest_rows: int) -> Plan:
    """``free``: the first dealt doc no honest peer sends; ``honest_rows``: the rows they send."""
    if name == "sleeper":
        return sleeper(bench, sizes, deal, free)
    if name.startswith("eviction"):
        return eviction(bench, sizes, deal, free, honest_rows, with_history=name == "eviction (volume-trusted)")
    if name == "reference shift":
        return reference_shift(bench, sizes, deal)
    raise ValueError(f"attack: {name!r} is not one of {TRUST_ATTACKS}")
