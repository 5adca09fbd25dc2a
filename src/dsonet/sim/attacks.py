"""Byzantine behaviours a simulated node can run (the paper's threat model plus the literature).

Each attack is a small class: ``payloads(node, view, n)`` returns the bytes the node publishes
in a round (``n`` = the size of an honest batch). Every payload is a real signed batch from
`dsonet.codec`, except where the attack *is* a broken signature or payload. Since protocol v2
a batch carries codes of unit vectors against the profile's fixed baseline, with scales no
larger than a unit vector's code can have (`dsonet.codec.batch.scale_bound`): anything else is
refused at verification, so the attacks below send the worst codes that pass it.

What an attacker knows (`View`): every honest batch of the round (it is on the wire), hence the
honest vectors' per-coordinate mean and spread, and the kind of query users ask (it can encode
questions like ours). This is the omniscient attacker of ALIE (Baruch et al., 2019).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol

import msgpack
import numpy as np

from dsonet.codec import BitDeltaCodes, Profile, make_batch, sign_batch
from dsonet.codec.batch import scale_bound
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.sim.corpus import DOMAIN


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


@dataclass
class SimNode:
    identity: NodeIdentity
    name: str
    sybils: list[NodeIdentity] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return self.identity.node_id


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


class Attack(Protocol):
    name: str
    forged: bool = False  # the attack's payloads must never be admitted: bad signature,
    tampered: bool = False  # altered content,
    replayed: bool = False  # or a batch already received

    def payloads(self, node: SimNode, view: View, n: int) -> list[bytes]:
        """The bytes this node publishes this round; ``n`` is an honest batch's size."""
        ...


class RandomSignsScales(Attack):
    """The paper's Byzantine node: arbitrary sign bits and large scales. Scales up to 100× an honest
    one are refused at verification since protocol v2, so it sends random signs at the largest
    scale that passes (a code farther from the baseline than any unit vector's)."""

    name = "random_signs"

    def payloads(self, node, view, n):
        p = view.profile
        texts = _pick(view.harmful, n, view.rng)
        words = view.rng.integers(0, 2**32, size=(len(texts), p.dim // p.group_size, -(-p.group_size // 32)),
                                  dtype=np.uint32)
        scales = np.tile(scale_bound(p) / 1.001, (len(texts), 1))
        codes = BitDeltaCodes(words, scales, p.baseline, p.group_size, p.rotation_seed)
        return [sign_batch(_experiences(texts, node.identity, view), codes, p, node.identity,
                           timestamp_ms=view.now_ms).to_msgpack()]


class ScaledNoise(Attack):
    """Honest-looking vectors plus Gaussian noise five times their norm."""

    name = "scaled_noise"

    def payloads(self, node, view, n):
        src = view.honest_vectors[view.rng.choice(len(view.honest_vectors), size=n)]
        noise = view.rng.standard_normal(src.shape) * (5.0 / np.sqrt(src.shape[1]))
        return [signed(node.identity, _pick(view.harmful, n, view.rng), src + noise, view)]


class SignFlip(Attack):
    """Honest deltas reversed around the honest mean: ê' = ē − (ê − ē)."""

    name = "sign_flip"

    def payloads(self, node, view, n):
        base = view.honest_vectors.mean(axis=0)
        src = view.honest_vectors[view.rng.choice(len(view.honest_vectors), size=n)]
        return [signed(node.identity, _pick(view.harmful, n, view.rng), 2 * base - src, view)]


class InDistribution(Attack):
    """ALIE: vectors μ + z·σ inside the honest cloud (z ≈ 1 plus a little per-row jitter),
    carrying harmful text. The MAD filter cannot see them; only the text gives them away."""

    name = "alie"

    def __init__(self, z: float = 1.0):
        self.z = z

    def payloads(self, node, view, n):
        mu, sigma = view.honest_vectors.mean(axis=0), view.honest_vectors.std(axis=0)
        direction = self.z * view.rng.choice([-1.0, 1.0], size=len(mu))  # one shared shift, as in ALIE
        rows = mu + sigma * (direction + 0.3 * view.rng.standard_normal((n, len(mu))))
        return [signed(node.identity, _pick(view.harmful, n, view.rng), _unit(rows), view)]


class TargetedHijack(Attack):
    """Vectors placed on likely queries (the attacker encodes questions like ours) with spam text,
    so they win top-k for those queries."""

    name = "hijack"

    def payloads(self, node, view, n):
        q = view.query_vectors[view.rng.choice(len(view.query_vectors), size=n, replace=n > len(view.query_vectors))]
        rows = q + view.rng.standard_normal(q.shape) * (0.05 / np.sqrt(q.shape[1]))
        return [signed(node.identity, _pick(view.harmful, n, view.rng), _unit(rows), view)]


class QualityInflation(Attack):
    """Garbage text with its own genuine encoding and a self-reported confidence of 0.99."""

    name = "quality_inflation"

    def payloads(self, node, view, n):
        idx = view.rng.choice(len(view.garbage), size=min(n, len(view.garbage)), replace=False)
        return [signed(node.identity, [view.garbage[i] for i in idx], view.garbage_vectors[idx], view, 0.99)]


class Replay(Attack):
    """Re-sends honest batches byte for byte (valid signatures, already seen)."""

    name = "replay"
    replayed = True

    def payloads(self, node, view, n):
        k = min(3, len(view.honest_payloads))
        return [view.honest_payloads[i] for i in view.rng.choice(len(view.honest_payloads), size=k, replace=False)]


class Forgery(Attack):
    """Claims an honest node's identity: its node id and public key, a correct hash, but a
    signature by the attacker's own key."""

    name = "forgery"
    forged = True

    def payloads(self, node, view, n):
        _, victim_key = view.honest_ids[int(view.rng.integers(len(view.honest_ids)))]
        content, _ = msgpack.unpackb(signed(node.identity, _pick(view.harmful, n, view.rng),
                                            view.honest_vectors[:n], view), raw=False)
        doc = msgpack.unpackb(content, raw=False)
        doc["key"] = victim_key
        forged = msgpack.packb(doc, use_bin_type=True)
        return [msgpack.packb([forged, node.identity.sign(hashlib.sha256(forged).hexdigest().encode())],
                              use_bin_type=True)]


class Tampering(Attack):
    """Takes honest batches in transit and alters them: flipped sign bits, a raised confidence."""

    name = "tampering"
    tampered = True

    def payloads(self, node, view, n):
        out = []
        for i in view.rng.choice(len(view.honest_payloads), size=min(2, len(view.honest_payloads)), replace=False):
            content, signature = msgpack.unpackb(view.honest_payloads[i], raw=False)
            doc = msgpack.unpackb(content, raw=False)
            code = bytearray(doc["rows"][0][5])
            code[0] ^= 0xFF
            doc["rows"][0][5], doc["rows"][0][2] = bytes(code), 0.99
            out.append(msgpack.packb([msgpack.packb(doc, use_bin_type=True), signature], use_bin_type=True))
        return out


class SybilFlood(Attack):
    """Each Byzantine node speaks through ``identities`` fresh keys, each sending a batch
    ``volume`` times an honest one of query-aimed vectors with spam text."""

    name = "sybil"

    def __init__(self, identities: int = 5, volume: int = 4):
        self.identities, self.volume = identities, volume

    def payloads(self, node, view, n):
        size = min(n * self.volume, len(view.harmful))
        out = []
        for ident in node.sybils[: self.identities]:
            q = view.query_vectors[view.rng.choice(len(view.query_vectors), size=size)]
            rows = _unit(q + view.rng.standard_normal(q.shape) * (0.3 / np.sqrt(q.shape[1])))
            out.append(signed(ident, _pick(view.harmful, size, view.rng), rows, view))
        return out


class Withholding(Attack):
    """Sends nothing: the honest share of the network's experiences shrinks."""

    name = "withholding"

    def payloads(self, node, view, n):
        return []


ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls
    for cls in (RandomSignsScales, ScaledNoise, SignFlip, InDistribution, TargetedHijack, QualityInflation,
                Replay, Forgery, Tampering, SybilFlood, Withholding)
}
