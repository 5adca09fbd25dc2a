"""A simulated fleet of N nodes in one process: real codec, real signatures, real aggregation,
real MiniLM embeddings of GSM8K text.

Honest experiences are the solution sentences of ``n_items`` GSM8K items, dealt to the honest
nodes and published over ``rounds`` rounds; the same set at every Byzantine fraction, so accuracy
moves only with the attack. Byzantine nodes (the first ⌊f·N⌋) run the attack instead. One
receiving node aggregates every round with each contender (rule + config) on the same bytes.

Between rounds the receiver asks ``n_feedback`` questions and reports, for every experience it
retrieved, whether the task succeeded (our stand-in for the verifier's reward); its library
drops experiences whose source fell under the reputation floor. At the end it asks ``n_eval``
held-out questions. A question counts as answered when its top-k holds a sentence of its own
solution and no attacker's experience.

With one shared stream, an attacker can only withhold its own experiences, so "withholding"
is flat by construction: it is here to show a round never waits on a quorum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig
from dsonet.codec.batch import default_profile, make_batch
from dsonet.errors import DsoError
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.sim.attacks import Attack, SimNode, View
from dsonet.sim.corpus import DOMAIN, Corpus

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


class Fleet:
    def __init__(self, corpus: Corpus, spec: FleetSpec, encoder_id: str, harmful, garbage, garbage_vectors):
        self.corpus, self.spec = corpus, spec
        self.profile = default_profile(corpus.d_vectors.shape[1], encoder_id)
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
                mine = self.docs[deal[(owner == h)]]
                sent = self.docs[deal[(owner == h) & (which_round == r)]]
                if len(sent) == 0:
                    continue
                prov = Provenance(node.node_id, "honest", now, r)
                exps = [Experience(self.corpus.docs[d], DOMAIN, 0.7, prov) for d in sent]
                batch = make_batch(exps, self.corpus.d_vectors[sent], self.profile, node.identity,
                                   baseline=self.corpus.d_vectors[mine].mean(axis=0), timestamp_ms=now)
                honest_payloads.append(batch.to_msgpack())
                honest_vectors.append(batch.vectors())
                sizes.append(len(sent))
            seen += honest_payloads
            view = View(np.concatenate(honest_vectors), list(seen),
                        [(n.node_id, n.identity.public_key) for n in honest],
                        self.corpus.q_vectors[self.items], self.harmful, self.garbage, self.garbage_vectors,
                        self.profile, now, np.random.default_rng(spec.seed + 100 + r))
            size = int(np.median(sizes))
            bad = [p for node in self.nodes[:n_byz] for p in attack.payloads(node, view, size)]
            mixed = [(p, False) for p in honest_payloads] + [(p, True) for p in bad]
            rounds.append([mixed[i] for i in rng.permutation(len(mixed))])
        return Traffic(rounds, attack)

    def run(self, traffic: Traffic, contender: Contender, encoder=None) -> Outcome:
        spec = self.spec
        soup = DeltaSoup(contender.config, [self.profile], contender.rule, encoder=encoder)
        lib_vecs = np.zeros((0, self.profile.dim), np.float32)
        lib_doc, lib_src = np.zeros(0, np.int64), np.zeros(0, dtype=object)  # doc index (−1: attacker), source
        sent_bad = admitted_bad = 0
        special = 0  # forged, tampered or replayed payloads that got in
        admitted: set[bytes] = set()
        for r, payloads in enumerate(traffic.rounds):
            now = T0_MS + r * ROUND_MS
            for payload, is_bad in payloads:
                try:
                    soup.submit(payload, now_ms=now)
                except DsoError:
                    continue
                if traffic.attack.replayed:
                    special += payload in admitted  # a second admission of the same bytes
                elif is_bad:
                    special += traffic.attack.forged or traffic.attack.tampered
                admitted.add(payload)
            result = soup.round(now_ms=now)
            bad_batch = np.array([self.doc_of_id.get(b.experiences[0].id) is None for b in result.batches], bool)
            sent_bad += sum(len(b) for b, x in zip(result.batches, bad_batch) if x)
            admitted_bad += sum(int(m.sum()) for m, x in zip(result.keep, bad_batch) if x)
            if result.merged:
                lib_vecs = np.concatenate([lib_vecs, np.stack([c.vector for c in result.merged])])
                lib_doc = np.concatenate([lib_doc, [self.doc_of_id.get(c.experience.id, -1) for c in result.merged]])
                lib_src = np.concatenate([lib_src, np.array([c.experience.provenance.node_id for c in result.merged],
                                                            dtype=object)])
            if r < len(traffic.rounds) - 1 and contender.config.feedback:
                hits, ok = self._ask(self.feedback_items, lib_vecs, lib_doc)
                for row, success in zip(hits, ok):
                    for j in row:
                        soup.record_outcome(lib_src[j], bool(success))
                alive = np.array([not soup.reputation.skipped(s) for s in lib_src], dtype=bool)
                lib_vecs, lib_doc, lib_src = lib_vecs[alive], lib_doc[alive], lib_src[alive]
        _, ok = self._ask(self.eval_items, lib_vecs, lib_doc)
        forged = special if traffic.attack.forged else 0
        tampered = special if traffic.attack.tampered else 0
        replayed = special if traffic.attack.replayed else 0
        return Outcome(float(ok.mean()), admitted_bad / sent_bad if sent_bad else 0.0, forged, tampered, replayed)

    def _ask(self, items: np.ndarray, lib_vecs: np.ndarray, lib_doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-k library rows per question, and whether each question was answered."""
        if len(lib_vecs) == 0:
            return np.zeros((len(items), 0), np.int64), np.zeros(len(items), bool)
        k = min(self.spec.k, len(lib_vecs))
        sims = self.corpus.q_vectors[items] @ lib_vecs.T  # (q, L)
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # (q, k)
        doc = lib_doc[top]
        relevant = (doc >= 0) & (self.corpus.doc_item[self.docs[np.maximum(doc, 0)]] == items[:, None])
        return top, relevant.any(axis=1) & (doc >= 0).all(axis=1)
