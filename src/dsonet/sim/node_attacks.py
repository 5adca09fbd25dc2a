"""Hostile peers against one real node: what each attack of `dsonet.bench.node_attacks` sends.

Each attack is a class behind `dsonet.sim.plan.Attack`, given a `NodeView` (the bench's shared
material and the docs it dealt) and answering with the `Plan` the bench publishes and then reads
the node against. The bench's run, measurements and module doc are in `dsonet.bench.node_attacks`.

- volume: fresh keys, one batch of ``sizes.volume_rows`` plausible rows each;
- sybil: fresh keys, one single-row batch each;
- poisoned batch: a signed batch with a scale of 3e38 in the same read as 12 honest single-row batches;
- takeover: a copy of an honest peer's experience (same text and domain) at confidence 1.0,
  signed by the attacker, then the attacker's tombstone for it;
- deferred fill: `FILL_KEYS` keys, each admitted once, then sending batches of 1,000 rows far over
  their rate, which the node holds back instead of dropping.

The attacks on trust:

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
  Before shares were fair the fresh key's flood evicted the newcomers' rows (40 of 40 at a capacity of 600),
  the volume-trusted key's, 580 honest rows. The flood's batch holds 1,000 rows less its history,
  a new key's hourly budget, and comes alone in its round, after the newcomers' rows are stored.
- reference shift: a copier's ~100 rows (six batches of copies of honest sentences) are all the
  node holds; then an honest node sends lone batches on another topic (sentences lifted into
  another subspace), each alone in its round. Before, six batches made the copier trusted, its
  rows the reference, and 7 of 8 lone batches were refused, each lowering the honest node's
  reputation. No honest warm-up here: the copier's rows are the only ones a reference could take.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from dsonet.codec.batch import scale_bound
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.tombstone import make_tombstone
from dsonet.sim.corpus import DOMAIN
from dsonet.sim.plan import Attack, Plan

FILL_KEYS = 5
EVICTION_ROOM = 100  # rows of the scaled-down library beyond the honest rows (and the flooder's history)
NEWCOMERS, NEWCOMER_ROWS = 4, 10
SLEEPER_HISTORY, SLEEPER_LIES = 5, 10
COPIER_BATCHES, COPIER_ROWS = 6, 17
LONE_BATCHES = 8


@dataclass(frozen=True)
class NodeView:
    """What an attack on the node sees: the bench's material and how it dealt the docs."""

    bench: Any  # `dsonet.bench.node_attacks.Bench` (texts, its encoder, profile, honest keys, rng)
    sizes: Any  # `dsonet.bench.node_attacks.Sizes`
    deal: np.ndarray  # the docs' order: the honest peers send them first
    free: int  # the first dealt doc no honest peer sends
    honest_rows: int  # the rows the honest peers send


def _docs(deal: np.ndarray, start: int, n: int) -> list[int]:
    return deal[start : start + n].tolist()


def _honest_batches(bench, identity, docs: list[int], per_batch: int, space: int = 0) -> list[tuple[bytes, set]]:
    out = []
    for start in range(0, len(docs), per_batch):
        mine = docs[start : start + per_batch]
        texts = [bench.encoder.learn(bench.docs[i], i, space=space) for i in mine]
        out.append((bench.batch(identity, [(i, -1) for i in mine], texts, space=space),
                    {(Experience(t, DOMAIN).id, identity.node_id) for t in texts}))
    return out


def poisoned(bench, identity: NodeIdentity) -> bytes:
    """A batch signed by ``identity`` whose one row has a scale of 3e38 (no unit vector's code has
    one): built as a valid batch, then its content changed and signed again, as an attacker would."""
    payload = bench.hostile(identity, 1, "poisoned")
    content, _ = msgpack.unpackb(payload)
    fields = msgpack.unpackb(content)
    code = bytearray(fields["rows"][0][-1])
    n_scales = int(scale_bound(bench.profile).size)
    code[len(code) - 4 * n_scales:] = np.full(n_scales, 3e38, "<f4").tobytes()
    fields["rows"][0][-1] = bytes(code)
    content = msgpack.packb(fields, use_bin_type=True)
    return msgpack.packb([content, identity.sign(hashlib.sha256(content).hexdigest().encode())], use_bin_type=True)


class Volume(Attack[NodeView]):
    name = "volume"

    def plan(self, view: NodeView) -> Plan:
        attackers = [NodeIdentity.from_seed(f"volume-{i}".encode()) for i in range(view.sizes.volume_keys)]
        rows = view.sizes.volume_rows
        return Plan(attackers, [view.bench.hostile(a, rows, f"v{i}") for i, a in enumerate(attackers)])


class Sybil(Attack[NodeView]):
    name = "sybil"

    def plan(self, view: NodeView) -> Plan:
        attackers = [NodeIdentity.from_seed(f"sybil-{i}".encode()) for i in range(view.sizes.sybil_keys)]
        return Plan(attackers, [view.bench.hostile(a, 1, f"s{i}") for i, a in enumerate(attackers)])


class PoisonedBatch(Attack[NodeView]):
    name = "poisoned batch"

    def plan(self, view: NodeView) -> Plan:  # it and the 12 honest batches go out together: one read
        attacker = NodeIdentity.from_seed(b"poisoner")
        return Plan([attacker], [poisoned(view.bench, attacker)], in_order=True)


class Takeover(Attack[NodeView]):
    name = "takeover"

    def plan(self, view: NodeView) -> Plan:
        bench = view.bench
        attacker, victim = NodeIdentity.from_seed(b"taker"), int(view.deal[0])  # sent by honest peer 0 in the warm-up
        exp = Experience(bench.docs[victim], DOMAIN)
        return Plan([attacker], [bench.batch(attacker, [(victim, -1)], [bench.docs[victim]], confidence=1.0)],
                    tombstones=[make_tombstone([exp.id], attacker).to_msgpack()],
                    victim_key=(exp.id, bench.honest[0].node_id))


class DeferredFill(Attack[NodeView]):
    name = "deferred fill"

    def plan(self, view: NodeView) -> Plan:  # each key's first batch first: admitted once, then the rest over its rate
        attackers = [NodeIdentity.from_seed(f"fill-{i}".encode()) for i in range(FILL_KEYS)]
        return Plan(attackers, [view.bench.hostile(a, view.sizes.volume_rows, f"f{i}-{j}")
                                for j in range(view.sizes.fill_batches) for i, a in enumerate(attackers)],
                    in_order=True)


class Sleeper(Attack[NodeView]):
    name = "sleeper"

    def plan(self, view: NodeView) -> Plan:
        bench, deal, free = view.bench, view.deal, view.free
        key = NodeIdentity.from_seed(b"sleeper")
        history = [p for p, _ in _honest_batches(bench, key, _docs(deal, free, 2 * SLEEPER_HISTORY), 2)]
        honest_docs = _docs(deal, free + 2 * SLEEPER_HISTORY,
                            view.sizes.volume_rows - 2 * SLEEPER_HISTORY - SLEEPER_LIES)
        lures = bench.queries[:SLEEPER_LIES]  # questions the searching clients ask
        # a lie's text encodes a sentence, its code a question
        lie_texts = [bench.encoder.learn(f"{bench.docs[i]} (the sleeper's {j})", int(i))
                     for j, i in enumerate(bench.short[:SLEEPER_LIES])]
        texts = [bench.encoder.learn(bench.docs[i], i) for i in honest_docs] + lie_texts
        vectors = np.concatenate([bench.encoder.vectors([(i, -1) for i in honest_docs]), lures])
        hostile = bench.signed(key, vectors, texts, confidence=1.0)
        lying = {(Experience(t, DOMAIN).id, key.node_id) for t in lie_texts}
        return Plan([key], [hostile], history=history, lying=lying, lures=lures, lone=True, in_order=True)


class EvictionUntrusted(Attack[NodeView]):
    name = "eviction (untrusted)"
    seed, with_history = b"evict-untrusted", False

    def plan(self, view: NodeView) -> Plan:
        bench, deal, free = view.bench, view.deal, view.free
        key = NodeIdentity.from_seed(self.seed)
        newcomers = [NodeIdentity.from_seed(f"evict-newcomer-{i}".encode()) for i in range(NEWCOMERS)]
        honest = [b for i, n in enumerate(newcomers)
                  for b in _honest_batches(bench, n, _docs(deal, free + i * NEWCOMER_ROWS, NEWCOMER_ROWS),
                                           NEWCOMER_ROWS)]
        start = free + NEWCOMERS * NEWCOMER_ROWS
        history = [p for p, _ in _honest_batches(bench, key, _docs(deal, start, 12), 2)] if self.with_history else []
        flood = bench.hostile(key, view.sizes.volume_rows - 2 * len(history), "evict")
        capacity = view.honest_rows + NEWCOMERS * NEWCOMER_ROWS + 2 * len(history) + EVICTION_ROOM
        return Plan([key], [flood], history=history, honest=honest, honest_keys={n.node_id for n in newcomers},
                    capacity=capacity, lone=True, in_order=True)


class EvictionVolumeTrusted(EvictionUntrusted):
    name = "eviction (volume-trusted)"
    seed, with_history = b"evict-volume-trusted", True


class ReferenceShift(Attack[NodeView]):
    name = "reference shift"

    def plan(self, view: NodeView) -> Plan:
        bench, deal = view.bench, view.deal
        copier, author = NodeIdentity.from_seed(b"ref-copier"), NodeIdentity.from_seed(b"ref-honest-author")
        history = [p for p, _ in _honest_batches(bench, copier, _docs(deal, 0, COPIER_BATCHES * COPIER_ROWS),
                                                 COPIER_ROWS)]
        lone = _honest_batches(bench, author,
                               _docs(deal, COPIER_BATCHES * COPIER_ROWS, LONE_BATCHES * view.sizes.honest_rows),
                               view.sizes.honest_rows, space=1)
        return Plan([copier], [], history=history, honest=lone, honest_keys={author.node_id}, warm_up=False,
                    lone=True, in_order=True)


NODE_ATTACKS: tuple[type[Attack[NodeView]], ...] = (
    Volume, Sybil, PoisonedBatch, Takeover, DeferredFill, Sleeper, EvictionUntrusted, EvictionVolumeTrusted,
    ReferenceShift)
