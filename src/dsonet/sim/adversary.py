"""Attack plans on a fleet's log: what the Byzantine nodes of a scenario send, and the record of it.

Any scenario's attackers (`dsonet.sim.scenario`: the demo and `dso bench learn --family drift`)
strike through here. Two waves: beside the honest batches, the attacks of `dsonet.sim.attacks`
(a query hijack with spam text, random signs and scales, a forged signature, tampered and
replayed honest batches), which verification or DeltaSoup should refuse every one of; and
poison (`publish_poison`), a plausible wrong lesson for every drift fact, honestly encoded and
correctly signed. Nothing on the wire tells it from an honest lesson (DeltaSoup's re-encoding
check passes it); only what it does to the agents' results can, through the outcomes they report.

The attackers know what the omniscient attacker of `dsonet.sim.attacks` knows: every honest
batch on the wire, the honest nodes' public keys, and the kind of question users ask (the
profile's encoder is a public model, so they can encode questions like ours).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dsonet.codec import Profile, decode, make_batch
from dsonet.codec.batch import claims
from dsonet.encoders.cache import cached_encode
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.network.transport import MSG_ID, SENDER, Message, Transport, subject_for
from dsonet.scope import Scope
from dsonet.sim.attacks import SimNode, View, attack
from dsonet.sim.plan import Attack
from dsonet.sim.nodes import is_batch
from dsonet.sim.texts import harmful_texts


@dataclass(frozen=True)
class Sent:
    """One payload a Byzantine node published."""

    node_id: str
    attack: str
    seq: int
    size: int  # bytes
    experiences: int  # how many it carries (0 for a payload that does not parse)
    texts: frozenset[str]


def byzantine_nodes(count: int, seed: str = "demo-byzantine") -> list[SimNode]:
    """``count`` attackers named byz0, byz1...; ``seed`` fixes their keys (one per configuration)."""
    return [SimNode(NodeIdentity.from_seed(f"{seed}-{j}".encode()), f"byz{j}") for j in range(count)]


def poison_sent(wire: list[Message], byz: list[SimNode]) -> list[Sent]:
    """The poison batches on the wire (`publish_poison` names them ``byz<j>-poison-...``), as sent records."""
    ids = {b.node_id for b in byz}
    out = []
    for m in wire:
        if m.headers.get(SENDER) in ids and "-poison-" in m.headers.get(MSG_ID, ""):
            texts = claims(m.data).texts
            out.append(Sent(m.headers[SENDER], "poison", m.seq, len(m.data), len(texts), frozenset(texts)))
    return out


CLASSIC = ("hijack", "random_signs", "forgery", "tampering", "replay")  # fleet attacks of `dsonet.sim.attacks`


def classic_plan(byz: list[SimNode], names: tuple[str, ...] = CLASSIC) -> list[tuple[SimNode, Attack]]:
    """The attacks called ``names`` (today's classic wave), dealt out among the Byzantine nodes."""
    attacks = [attack(name) for name in names]
    return [(node, chosen) for j, node in enumerate(byz) for chosen in attacks[j::len(byz)]]


def view(wire: list[Message], honest: dict[str, bytes], encoder, profile: Profile, questions: list[str],
         seed: int) -> View:
    """What the attackers see now; ``honest`` maps honest node ids to their public keys."""
    payloads = [m.data for m in wire if m.headers.get(SENDER) in honest and is_batch(m)]
    # the attacker's guess at the fleet's queries is the same list every run: encoded once, kept on disk
    query_vectors = cached_encode(encoder, questions, kind="query")
    # With nothing honest on the wire, the attackers aim at the queries they expect instead.
    vectors = np.concatenate([decode(p, [profile]).vectors() for p in payloads]) if payloads else query_vectors
    return View(honest_vectors=vectors, honest_payloads=payloads, honest_ids=list(honest.items()),
                query_vectors=query_vectors, harmful=harmful_texts(), garbage=(),
                garbage_vectors=np.zeros((0, profile.dim), np.float32), profile=profile,
                now_ms=int(time.time() * 1000), rng=np.random.default_rng(seed))


async def strike(transport: Transport, plan: list[tuple[SimNode, Attack]], seen: View, domain: str) -> list[Sent]:
    """Publish every payload of the plan on the fleet's log."""
    sent = []
    for node, chosen in plan:
        if (chosen.replayed or chosen.tampered) and not seen.honest_payloads:
            continue  # nothing honest on the wire to replay or tamper with
        for payload in chosen.plan(seen.at(node, min(10, len(seen.honest_vectors)))).hostile:
            msg_id = f"{node.name}-{chosen.name}-{seen.now_ms}-{len(sent)}"
            seq = await transport.publish(payload, subject_for("dso", "batch", domain),
                                          {SENDER: node.node_id, MSG_ID: msg_id})
            claimed = claims(payload)  # what it claims to carry; None when it does not parse
            texts = claimed.texts if claimed else ()
            sent.append(Sent(node.node_id, chosen.name, seq, len(payload), len(texts), frozenset(texts)))
    return sent


async def publish_poison(fleet, byz: list[SimNode], facts: list, model: str, domain: str,
                         lessons: list[tuple[str, Scope]] | None = None) -> list[str]:
    """Each Byzantine node signs and publishes its share of the facts' wrong lessons, honestly encoded;
    or of ``lessons`` (text, the scope it claims), where an attacker aims each at one environment."""
    if lessons is None:
        lessons = [(t, Scope()) for t in {f.poison for f in facts if f.poison}]
    lessons = sorted(set(lessons), key=lambda lesson: (lesson[0], str(lesson[1])))
    texts = [t for t, _ in lessons]
    vectors = fleet.encoder.encode(texts, kind="document")
    now = int(time.time() * 1000)
    for j, node in enumerate(byz):
        rows = list(range(j, len(texts), len(byz)))
        exps = [Experience(texts[r], domain, 0.9, Provenance(node.node_id, model, now, 0), lessons[r][1]) for r in rows]
        payload = make_batch(exps, vectors[rows], fleet.profile, node.identity, timestamp_ms=now).to_msgpack()
        await fleet.attacker.publish(payload, subject_for("dso", "batch", domain),
                                     {SENDER: node.node_id, MSG_ID: f"byz{j}-poison-{now}"})
    return texts
