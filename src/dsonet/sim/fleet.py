"""A simulated fleet of N nodes in one process: real codec, real signatures, real aggregation,
real MiniLM embeddings of GSM8K text.

Honest experiences are the solution sentences of ``n_items`` GSM8K items, dealt to the honest
nodes and published over ``rounds`` rounds; the same set at every Byzantine fraction, so accuracy
moves only with the attack. Byzantine nodes (the first ⌊f·N⌋) run the attack instead. For each
contender (rule + config) one real observing `Node` (a fleet of one, `dsonet.sim.nodes.InProcessFleet`,
the fleet the scenarios run) reads the same bytes from an in-process log:
its DeltaSoup admits, its library stores one row per signer and merges near-duplicates, its
search answers. What `dso bench robustness` measures is the node's own path.

Between rounds the observer asks ``n_feedback`` questions and reports, for every experience it
retrieved, whether the task succeeded (our stand-in for the verifier's reward), through
`Node.record_outcome`: sources fall in reputation, and a source under the floor is hidden from
searches. At the end it asks ``n_eval``
held-out questions. A question counts as answered when its top-k holds a sentence of its own
solution and no attacker's experience.

With one shared stream, an attacker can only withhold its own experiences, so "withholding"
is flat by construction: it is here to show a round never waits on a quorum.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dsonet.aggregate import DeltaSoupConfig
from dsonet.codec import default_profile, make_batch
from dsonet.codec.batch import claims
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Hit
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for
from dsonet.sim.attacks import SimNode, View
from dsonet.sim.plan import Attack
from dsonet.sim.corpus import DOMAIN, Corpus
from dsonet.sim.nodes import InProcessFleet

T0_MS = 1_750_000_000_000
ROUND_MS = 60_000  # the paper's broadcast interval


@dataclass(frozen=True)
class FleetSpec:
    n_nodes: int = 100
    n_items: int = 600  # GSM8K items in play; all their usable sentences are honest experiences
    n_eval: int = 200  # held-out questions asked at the end
    n_feedback: int = 200  # questions asked between rounds (outcome feedback)
    rounds: int = 2
    k: int = 5  # top-k retrieved per question (the experience-ledger paper's k)
    seed: int = 0


@dataclass(frozen=True)
class Contender:
    label: str
    rule: str
    config: DeltaSoupConfig


@dataclass(frozen=True)
class Outcome:
    accuracy: float
    attacker_admitted: float  # share of the attackers' experiences admitted into the library
    forged_admitted: int
    tampered_admitted: int
    replayed_admitted: int


@dataclass(frozen=True)
class Traffic:
    """What the receiver gets in each round: payloads and whether an attacker sent them."""

    rounds: list[list[tuple[bytes, bool]]]
    attack: Attack


class MemoEncoder:
    """The receiver's own encoder, with the texts it has already encoded remembered: the
    re-encoding defence then costs a lookup for texts seen before and a real MiniLM call otherwise."""

    def __init__(self, encoder, texts, vectors):
        self.inner, self.memo = encoder, dict(zip(texts, np.asarray(vectors, np.float32)))

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def id(self) -> str:
        return self.inner.id

    def encode(self, texts, kind="document"):
        missing = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if missing:
            self.memo.update(zip(missing, self.inner.encode(missing, kind=kind)))
        return np.stack([self.memo[t] for t in texts])


class SimulatedFleet:
    """N simulated nodes (`SimNode`: keys, and the traffic built for them once) observed by one real
    node, a fleet of one (`InProcessFleet`) on the simulation's log and clock."""

    def __init__(self, corpus: Corpus, spec: FleetSpec, encoder_id: str, harmful, garbage, garbage_vectors):
        self.corpus, self.spec = corpus, spec
        # the simulated space's fixed baseline (protocol v2), as a shipped head's would be: the corpus mean
        self.profile = default_profile(corpus.d_vectors.shape[1], encoder_id, corpus.d_vectors.mean(axis=0))
        self.harmful, self.garbage, self.garbage_vectors = tuple(harmful), tuple(garbage), garbage_vectors
        rng = np.random.default_rng(spec.seed)
        n_avail = len(corpus.questions)
        if spec.n_items > n_avail or spec.n_eval + spec.n_feedback > spec.n_items:
            raise ValueError(f"n_items={spec.n_items} must be ≤ {n_avail} and ≥ n_eval + n_feedback "
                             f"= {spec.n_eval + spec.n_feedback}")
        self.items = rng.permutation(n_avail)[: spec.n_items]
        self.eval_items = self.items[: spec.n_eval]
        self.feedback_items = self.items[spec.n_eval : spec.n_eval + spec.n_feedback]
        self.docs = np.flatnonzero(np.isin(corpus.doc_item, self.items))
        self.nodes = [SimNode(NodeIdentity.from_seed(f"sim-node-{i}".encode()), f"node-{i}",
                              [NodeIdentity.from_seed(f"sim-sybil-{i}-{j}".encode()) for j in range(5)])
                      for i in range(spec.n_nodes)]
        ids = {corpus_id: i for i, corpus_id in enumerate(self._doc_ids())}
        self.doc_of_id = ids

    def _doc_ids(self) -> list[str]:
        return [Experience(self.corpus.docs[d], DOMAIN).id for d in self.docs]

    def traffic(self, attack: Attack, fraction: float) -> Traffic:
        """Every round's payloads, built once and replayed to each contender."""
        spec, rng = self.spec, np.random.default_rng(self.spec.seed + 1)
        n_byz = int(round(fraction * spec.n_nodes))
        honest = self.nodes[n_byz:]
        deal = rng.permutation(len(self.docs))
        owner = np.arange(len(deal)) % len(honest)  # docs dealt round-robin to honest nodes
        which_round = rng.integers(0, spec.rounds, size=len(deal))
        rounds, seen = [], []
        for r in range(spec.rounds):
            now = T0_MS + r * ROUND_MS
            honest_payloads, honest_vectors, sizes = [], [], []
            for h, node in enumerate(honest):
                sent = self.docs[deal[(owner == h) & (which_round == r)]]
                if len(sent) == 0:
                    continue
                prov = Provenance(node.node_id, "honest", now, r)
                exps = [Experience(self.corpus.docs[d], DOMAIN, 0.7, prov) for d in sent]
                batch = make_batch(exps, self.corpus.d_vectors[sent], self.profile, node.identity, timestamp_ms=now)
                honest_payloads.append(batch.to_msgpack())
                honest_vectors.append(batch.vectors())
                sizes.append(len(sent))
            seen += honest_payloads
            view = View(np.concatenate(honest_vectors), list(seen),
                        [(n.node_id, n.identity.public_key) for n in honest],
                        self.corpus.q_vectors[self.items], self.harmful, self.garbage, self.garbage_vectors,
                        self.profile, now, np.random.default_rng(spec.seed + 100 + r))
            size = int(np.median(sizes))
            bad = [p for node in self.nodes[:n_byz] for p in attack.plan(view.at(node, size)).hostile]
            mixed = [(p, False) for p in honest_payloads] + [(p, True) for p in bad]
            rounds.append([mixed[i] for i in rng.permutation(len(mixed))])
        return Traffic(rounds, attack)

    def run(self, traffic: Traffic, contender: Contender, encoder=None) -> Outcome:
        """Deliver every round's payloads to one real observing `Node` (DeltaSoup with the contender's
        rule and config, its SQLite library, the library's merge) through an in-process log on the
        simulation's clock, ask the questions through the node's search, and feed outcomes back
        through the node."""
        return asyncio.run(self._run(traffic, contender, encoder))

    async def _run(self, traffic: Traffic, contender: Contender, encoder) -> Outcome:
        clock = _Clock(T0_MS)
        sent = [(claims(p), bad) for r in traffic.rounds for p, bad in r]
        honest_hashes = {c.hash for c, bad in sent if c and not bad}
        bad_hashes = {c.hash for c, bad in sent if c and bad} - honest_hashes
        admitted: list[tuple[str, int]] = []  # (batch hash, admitted rows) per admitted batch, every round
        with tempfile.TemporaryDirectory(prefix="dso-sim-") as tmp:
            config = NodeConfig(Path(tmp), encoder=None, dim=self.profile.dim, encoder_id=self.profile.encoder_id,
                                rule=contender.rule, soup=asdict(contender.config), batch_interval_s=3600)
            # the observer is a fleet of one on the simulation's log; every simulated node sends on its
            # other connection (the one a scenario's attackers use)
            fleet = await InProcessFleet.open([config], [NodeIdentity.from_seed(b"sim-observer")],
                                              InProcessHub(clock=clock.seconds), encoder, self.profile)
            node = fleet.nodes[0]
            node.on_round = lambda result: admitted.extend(
                (b.hash, int(k.sum())) for b, k in zip(result.batches, result.keep))
            await fleet.listen()
            for r, payloads in enumerate(traffic.rounds):
                clock.now_ms = T0_MS + r * ROUND_MS
                for payload, _ in payloads:
                    await fleet.attacker.publish(payload, subject_for("dso", "batch", DOMAIN))
                await fleet.settle()
                if r < len(traffic.rounds) - 1 and contender.config.feedback:
                    hits, ok = await self._ask(node, self.feedback_items)
                    for row, success in zip(hits, ok):
                        await node.record_outcome(row, bool(success))
            _, ok = await self._ask(node, self.eval_items)
            await fleet.close()
        sent_bad = sum(len(c.texts) for c, bad in sent if c and bad)
        admitted_bad = sum(n for h, n in admitted if h in bad_hashes)
        seen = [h for h, _ in admitted]
        # a replay is an honest batch's bytes again: admitted, its hash would be admitted twice
        special = len(seen) - len(set(seen)) if traffic.attack.replayed else \
            sum(h in bad_hashes for h in seen) if traffic.attack.forged or traffic.attack.tampered else 0
        forged = special if traffic.attack.forged else 0
        tampered = special if traffic.attack.tampered else 0
        replayed = special if traffic.attack.replayed else 0
        return Outcome(float(ok.mean()), admitted_bad / sent_bad if sent_bad else 0.0, forged, tampered, replayed)

    async def _ask(self, node: Node, items: np.ndarray) -> tuple[list[list[Hit]], np.ndarray]:
        """The node's top-k hits per question, and whether each question was answered: its top-k
        holds a sentence of its own solution and no attacker's experience."""
        hits, ok = [], np.zeros(len(items), bool)
        for i, item in enumerate(items.tolist()):
            found = await node.search(vector=self.corpus.q_vectors[item], k=self.spec.k, min_similarity=-1.0)
            docs = [self.doc_of_id.get(h.experience.id, -1) for h in found]
            ok[i] = bool(found) and all(d >= 0 for d in docs) and any(
                self.corpus.doc_item[self.docs[d]] == item for d in docs)
            hits.append(found)
        return hits, ok


class _Clock:
    """The simulation's clock: the log stores messages at the round's time, so freshness holds."""

    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def seconds(self) -> float:
        return self.now_ms / 1000
