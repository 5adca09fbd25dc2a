"""Byzantine behaviours a simulated node can run (the paper's threat model plus the literature).

Each attack is a small class behind `dsonet.sim.plan.Attack`: ``plan(view)`` returns the bytes
``view.node`` publishes in a round (``view.n`` = the size of an honest batch) as a `Plan`. Every
payload is a real signed batch from `dsonet.codec`, except where the attack *is* a broken
signature or payload. Since protocol v2 a batch carries codes of unit vectors against the
profile's fixed baseline, with scales no larger than a unit vector's code can have
(`dsonet.codec.batch.scale_bound`): anything else is refused at verification, so the attacks
below send the worst codes that pass it.

What an attacker knows (`View`): every honest batch of the round (it is on the wire), hence the
honest vectors' per-coordinate mean and spread, and the kind of query users ask (it can encode
questions like ours). This is the omniscient attacker of ALIE (Baruch et al., 2019).

Here too is the one registry of attacks (`attack`, `names`): these, at the ``fleet`` level, and
the attacks on one real node of `dsonet.sim.node_attacks`, at the ``node`` level.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

import msgpack
import numpy as np

from dsonet.codec import BitDeltaCodes, Profile, make_batch, sign_batch
from dsonet.codec.batch import scale_bound
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.sim.corpus import DOMAIN
from dsonet.sim.node_attacks import NODE_ATTACKS
from dsonet.sim.plan import Attack, Plan


@dataclass
class SimNode:
    identity: NodeIdentity
    name: str
    sybils: list[NodeIdentity] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return self.identity.node_id


@dataclass
class View:
    honest_vectors: np.ndarray  # (m, d) this round's honest ê, as any receiver decodes them
    honest_payloads: list[bytes]  # every honest batch published so far, byte for byte
    honest_ids: list[tuple[str, bytes]]  # (node_id, public key) of honest nodes
    query_vectors: np.ndarray  # (q, d) the attacker's guess at likely queries
    harmful: tuple[str, ...]  # harmful / spam texts
    garbage: tuple[str, ...]  # word salad
    garbage_vectors: np.ndarray  # real encodings of ``garbage``
    profile: Profile
    now_ms: int
    rng: np.random.Generator
    node: SimNode | None = None  # the Byzantine node that strikes (`at`)
    n: int = 0  # the size of an honest batch this round

    def at(self, node: SimNode, n: int) -> "View":
        """This view, seen by ``node`` in a round whose honest batches hold ``n`` experiences."""
        return replace(self, node=node, n=n)


def signed(node: NodeIdentity, texts, vectors: np.ndarray, view: View, confidence: float = 0.6,
           model: str = "attacker") -> bytes:
    """A genuine signed batch carrying ``texts`` with the directions of ``vectors`` (which need not
    encode them): the profile's vectors are unit length, so the attacker sends those."""
    return make_batch(_experiences(texts, node, view, confidence, model), _unit(vectors), view.profile, node,
                      timestamp_ms=view.now_ms).to_msgpack()


def _experiences(texts, node: NodeIdentity, view: View, confidence: float = 0.6, model: str = "attacker"):
    prov = Provenance(node.node_id, model, view.now_ms, 0)
    return [Experience(t, DOMAIN, confidence, prov) for t in texts]


def _pick(texts: tuple[str, ...], n: int, rng: np.random.Generator) -> list[str]:
    return [texts[i] for i in rng.choice(len(texts), size=min(n, len(texts)), replace=False)]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def _sent(view: View, payloads: list[bytes]) -> Plan:
    """A fleet attack's plan: what ``view.node`` publishes this round."""
    return Plan([view.node.identity], payloads)


class RandomSignsScales(Attack[View]):
    """The paper's Byzantine node: arbitrary sign bits and large scales. Scales up to 100× an honest
    one are refused at verification since protocol v2, so it sends random signs at the largest
    scale that passes (a code farther from the baseline than any unit vector's)."""

    name = "random_signs"

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        p = view.profile
        texts = _pick(view.harmful, n, view.rng)
        words = view.rng.integers(0, 2**32, size=(len(texts), p.dim // p.group_size, -(-p.group_size // 32)),
                                  dtype=np.uint32)
        scales = np.tile(scale_bound(p) / 1.001, (len(texts), 1))
        codes = BitDeltaCodes(words, scales, p.baseline, p.group_size, p.rotation_seed)
        return _sent(view, [sign_batch(_experiences(texts, node.identity, view), codes, p, node.identity,
                                       timestamp_ms=view.now_ms).to_msgpack()])


class ScaledNoise(Attack[View]):
    """Honest-looking vectors plus Gaussian noise five times their norm."""

    name = "scaled_noise"

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        src = view.honest_vectors[view.rng.choice(len(view.honest_vectors), size=n)]
        noise = view.rng.standard_normal(src.shape) * (5.0 / np.sqrt(src.shape[1]))
        return _sent(view, [signed(node.identity, _pick(view.harmful, n, view.rng), src + noise, view)])


class SignFlip(Attack[View]):
    """Honest deltas reversed around the honest mean: ê' = ē − (ê − ē)."""

    name = "sign_flip"

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        base = view.honest_vectors.mean(axis=0)
        src = view.honest_vectors[view.rng.choice(len(view.honest_vectors), size=n)]
        return _sent(view, [signed(node.identity, _pick(view.harmful, n, view.rng), 2 * base - src, view)])


class InDistribution(Attack[View]):
    """ALIE: vectors μ + z·σ inside the honest cloud (z ≈ 1 plus a little per-row jitter),
    carrying harmful text. The MAD filter cannot see them; only the text gives them away."""

    name = "alie"

    def __init__(self, z: float = 1.0):
        self.z = z

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        mu, sigma = view.honest_vectors.mean(axis=0), view.honest_vectors.std(axis=0)
        direction = self.z * view.rng.choice([-1.0, 1.0], size=len(mu))  # one shared shift, as in ALIE
        rows = mu + sigma * (direction + 0.3 * view.rng.standard_normal((n, len(mu))))
        return _sent(view, [signed(node.identity, _pick(view.harmful, n, view.rng), _unit(rows), view)])


class TargetedHijack(Attack[View]):
    """Vectors placed on likely queries (the attacker encodes questions like ours) with spam text,
    so they win top-k for those queries."""

    name = "hijack"

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        q = view.query_vectors[view.rng.choice(len(view.query_vectors), size=n, replace=n > len(view.query_vectors))]
        rows = q + view.rng.standard_normal(q.shape) * (0.05 / np.sqrt(q.shape[1]))
        return _sent(view, [signed(node.identity, _pick(view.harmful, n, view.rng), _unit(rows), view)])


class QualityInflation(Attack[View]):
    """Garbage text with its own genuine encoding and a self-reported confidence of 0.99."""

    name = "quality_inflation"

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        idx = view.rng.choice(len(view.garbage), size=min(n, len(view.garbage)), replace=False)
        texts = [view.garbage[i] for i in idx]
        return _sent(view, [signed(node.identity, texts, view.garbage_vectors[idx], view, 0.99)])


class Replay(Attack[View]):
    """Re-sends honest batches byte for byte (valid signatures, already seen)."""

    name = "replay"
    replayed = True

    def plan(self, view: View) -> Plan:
        k = min(3, len(view.honest_payloads))
        picked = view.rng.choice(len(view.honest_payloads), size=k, replace=False)
        return _sent(view, [view.honest_payloads[i] for i in picked])


class Forgery(Attack[View]):
    """Claims an honest node's identity: its node id and public key, a correct hash, but a
    signature by the attacker's own key."""

    name = "forgery"
    forged = True

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        _, victim_key = view.honest_ids[int(view.rng.integers(len(view.honest_ids)))]
        content, _ = msgpack.unpackb(signed(node.identity, _pick(view.harmful, n, view.rng),
                                            view.honest_vectors[:n], view), raw=False)
        doc = msgpack.unpackb(content, raw=False)
        doc["key"] = victim_key
        forged = msgpack.packb(doc, use_bin_type=True)
        return _sent(view, [msgpack.packb([forged, node.identity.sign(hashlib.sha256(forged).hexdigest().encode())],
                                          use_bin_type=True)])


class Tampering(Attack[View]):
    """Takes honest batches in transit and alters them: flipped sign bits, a raised confidence."""

    name = "tampering"
    tampered = True

    def plan(self, view: View) -> Plan:
        out = []
        for i in view.rng.choice(len(view.honest_payloads), size=min(2, len(view.honest_payloads)), replace=False):
            content, signature = msgpack.unpackb(view.honest_payloads[i], raw=False)
            doc = msgpack.unpackb(content, raw=False)
            code = bytearray(doc["rows"][0][-1])
            code[0] ^= 0xFF
            doc["rows"][0][-1], doc["rows"][0][2] = bytes(code), 0.99
            out.append(msgpack.packb([msgpack.packb(doc, use_bin_type=True), signature], use_bin_type=True))
        return _sent(view, out)


class SybilFlood(Attack[View]):
    """Each Byzantine node speaks through ``identities`` fresh keys, each sending a batch
    ``volume`` times an honest one of query-aimed vectors with spam text."""

    name = "sybil"

    def __init__(self, identities: int = 5, volume: int = 4):
        self.identities, self.volume = identities, volume

    def plan(self, view: View) -> Plan:
        node, n = view.node, view.n
        size = min(n * self.volume, len(view.harmful))
        out = []
        for ident in node.sybils[: self.identities]:
            q = view.query_vectors[view.rng.choice(len(view.query_vectors), size=size)]
            rows = _unit(q + view.rng.standard_normal(q.shape) * (0.3 / np.sqrt(q.shape[1])))
            out.append(signed(ident, _pick(view.harmful, size, view.rng), rows, view))
        return Plan(node.sybils[: self.identities], out)


class Withholding(Attack[View]):
    """Sends nothing: the honest share of the network's experiences shrinks."""

    name = "withholding"

    def plan(self, view: View) -> Plan:
        return _sent(view, [])


FLEET_ATTACKS: tuple[type[Attack[View]], ...] = (
    RandomSignsScales, ScaledNoise, SignFlip, InDistribution, TargetedHijack, QualityInflation, Replay, Forgery,
    Tampering, SybilFlood, Withholding)
Level = Literal["fleet", "node"]
# fleet: what a simulated Byzantine node sends in a round of the robustness fleet, the demo and the drift bench;
# node: hostile peers against one real node (`dsonet.bench.node_attacks`). A name is unique within its level.
ATTACKS: dict[Level, dict[str, type[Attack]]] = {"fleet": {cls.name: cls for cls in FLEET_ATTACKS},
                                                 "node": {cls.name: cls for cls in NODE_ATTACKS}}


def names(level: Level) -> tuple[str, ...]:
    """The attacks of ``level``, in the order the benches run and report them."""
    return tuple(_level(level))


def attack(name: str, level: Level = "fleet") -> Attack:
    """The attack called ``name`` at ``level``, with its default settings."""
    known = _level(level)
    if name not in known:
        raise ValueError(f"attack: {name!r} is not an attack at the {level} level; choose from {', '.join(known)}")
    return known[name]()


def _level(level: str) -> dict[str, type[Attack]]:
    if level not in ATTACKS:
        raise ValueError(f"level: {level!r} is not a level of attack; choose from {', '.join(ATTACKS)}")
    return ATTACKS[level]
