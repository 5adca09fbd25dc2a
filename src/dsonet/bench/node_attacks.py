"""Attacks on the node: hostile peers against one real `Node`, while agents search it.

Each attack gets a fresh node (its SQLite library, DeltaSoup at the production defaults, the
library's merge) on an in-process log: the code path of `dso node start` minus NATS and HTTP,
as in `dsonet.sim.fleet`, a fleet of one (`dsonet.sim.nodes.InProcessFleet`). First 12 honest
peers publish GSM8K solution sentences (6 batches each), and agents report their lessons helped
until they are trusted, as long-running peers are (volume alone lifts a key to 0.6, under
`trusted`); then 20 concurrent clients search the node while nothing else happens
(the baseline), then again while the attacker publishes, interleaved with one more batch from
every honest peer. Reported per attack:

- ``attacker_rows``: rows of the attacker's keys in the library once the node has read everything;
- ``honest_rows_lost``: honest (id, signer) rows sent and not in the library, other than those the
  round's content filter refused (target 0); ``honest_rows_filtered``: those (the median rule's
  false positives, attack or not; ``_during``: in the rounds of the attack);
- ``rss_growth_mb``: the process's peak resident memory during the attack over the baseline;
- search latency p50 / p99 (ms) with 20 concurrent clients, during the attack and without it;
- ``honest_min_reputation``: the lowest reputation of an honest key at the end (an honest key punished);
- for the sleeper, ``lying_rows_admitted`` of ``lying_rows_sent`` and ``lying_top_hits``.

BLAS threads are held as `dso node start` holds them (`dsonet.network.access.serving`).

The vectors: MiniLM encodings of GSM8K sentences (questions for the searches), lifted to the
default profile's 7680 dims by a fixed orthonormal map (as `dso bench codec` does). The node's
encoder, used by the re-encoding defence, answers each text the bench sends with the vector
its sender encoded (a hostile text's vector is a mix of two honest ones): hostile rows are
exactly as plausible as honest ones, the worst case for what gets stored. A node with the real
encoder spends about 5 ms of CPU more per row of a new key (MiniLM at ~200 texts/s on 2 cores).

The attacks:
- volume: fresh keys, one batch of 1,000 plausible rows each (40 keys; 6 with --quick);
- sybil: fresh keys, one single-row batch each (5,000 keys; 1,500 with --quick);
- poisoned batch: a signed batch with a scale of 3e38 in the same read as 12 honest single-row batches;
- takeover: a copy of an honest peer's experience (same text and domain) at confidence 1.0,
  signed by the attacker, then the attacker's tombstone for it;
- deferred fill: 5 keys, each admitted once, then sending batches of 1,000 rows (1.5 MB each) far
  over their rate, which the node holds back instead of dropping (100 each; 6 with --quick):
  a queue bounded by count, not bytes, would hold 745 MB for these 5 keys, and one read whole
  at every pass would slow every pass. Reported: ``deferred_batches`` and
  ``deferred_mb`` held once the node has read everything;
- sleeper, eviction (untrusted), eviction (volume-trusted), reference shift: the attacks on trust.

What each attack sends is its plan in `dsonet.sim.node_attacks` (with how the trust attacks work),
chosen by name from the one registry of attacks (`dsonet.sim.attacks.attack`, level ``node``);
this module delivers the plan to the node and measures.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import msgpack
import numpy as np

from dsonet.aggregate import DeltaSoupConfig
from dsonet.codec import default_profile, make_batch
from dsonet.experience import MAX_TEXT_CHARS, Experience, normalise_text
from dsonet.identity import NodeIdentity
from dsonet.network.access import serving
from dsonet.network.ingest import DEFERRED_BYTES, DEFERRED_KEY_BYTES, DEFERRED_NEW_KEYS_BYTES
from dsonet.network.node import NodeConfig
from dsonet.network.transport import subject_for
from dsonet.sim.attacks import attack, names
from dsonet.sim.corpus import DOMAIN
from dsonet.sim.node_attacks import NodeView
from dsonet.sim.nodes import InProcessFleet
from dsonet.sim.plan import Plan

DIM = 7680
HONEST_PEERS = 12
WARMUP_BATCHES = 6  # batches per honest peer before the attack; outcomes then make them trusted (`earn_trust`)
CLIENTS = 20
TRUSTED_FLOOR = 0.7


@dataclass(frozen=True)
class Sizes:
    volume_keys: int
    volume_rows: int
    sybil_keys: int
    honest_rows: int  # rows per honest warm-up batch
    baseline_s: float  # how long the clients search with no attack
    fill_batches: int  # batches of `volume_rows` rows from each of the deferred fill's keys (`FILL_KEYS`)

    @classmethod
    def of(cls, quick: bool) -> "Sizes":
        return cls(6, 1000, 1500, 10, 1.0, 6) if quick else cls(40, 1000, 5000, 20, 4.0, 100)


class BenchEncoder:
    """The node's encoder in this benchmark: each text the bench sends maps to the vector its
    sender encoded (see the module doc); any other text is refused."""

    def __init__(self, encoder_id: str, lifts: list[np.ndarray], base: np.ndarray):
        self.id, self.dim = encoder_id, lifts[0].shape[0]
        # (d, 384) orthonormal columns each: space 0 is the corpus's topic, space 1 "another topic"
        # (the same sentences in a subspace nearly orthogonal to it); (n, 384) MiniLM vectors
        self._lifts, self._base = lifts, base
        self._mix: dict[str, tuple[int, int, int]] = {}  # text -> (doc, doc mixed in or -1, space)

    def learn(self, text: str, doc: int, mixed: int = -1, space: int = 0) -> str:
        text = normalise_text(text)  # what an experience holds, and so what re-encoding asks for
        self._mix[text] = (doc, mixed, space)
        return text

    def vectors(self, pairs: list[tuple[int, int]], space: int = 0) -> np.ndarray:
        a = np.array([p[0] for p in pairs])
        b = np.array([p[1] for p in pairs])
        x = self._base[a] + np.where(b[:, None] >= 0, 0.5 * self._base[np.maximum(b, 0)], 0.0)
        x = (x @ self._lifts[space].T).astype(np.float32)  # (n, d)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def encode(self, texts, kind="document") -> np.ndarray:
        unknown = [t for t in texts if t not in self._mix]
        if unknown:
            raise KeyError(f"the bench never sent {unknown[0][:60]!r}")
        out = np.empty((len(texts), self.dim), np.float32)
        for space in range(len(self._lifts)):
            mine = [i for i, t in enumerate(texts) if self._mix[t][2] == space]
            if mine:
                out[mine] = self.vectors([self._mix[texts[i]][:2] for i in mine], space)
        return out


class Bench:
    """The shared material: texts, vectors, the profile, honest identities."""

    def __init__(self, encoder_id: str, docs: tuple[str, ...], doc_vectors: np.ndarray, query_vectors: np.ndarray):
        lifts = [np.linalg.qr(np.random.default_rng(seed).standard_normal((DIM, doc_vectors.shape[1])))[0]
                 .astype(np.float32) for seed in (1234, 4321)]
        lift = lifts[0]
        self.docs = docs
        self.encoder = BenchEncoder(f"{encoder_id}-lifted{DIM}", lifts, doc_vectors)
        for i, text in enumerate(docs):
            self.encoder.learn(text, i)
        self.queries = (query_vectors @ lift.T).astype(np.float32)
        self.queries /= np.linalg.norm(self.queries, axis=1, keepdims=True)
        self.profile = default_profile(DIM, self.encoder.id, self.encoder.vectors([(i, -1) for i in range(len(docs))]
                                                                                  ).mean(axis=0))
        self.honest = [NodeIdentity.from_seed(f"node-attacks-honest-{i}".encode()) for i in range(HONEST_PEERS)]
        # hostile texts: an honest sentence with a tag, short enough to be an experience
        self.short = [i for i, t in enumerate(docs) if len(t.split()) <= 28 and len(t) <= MAX_TEXT_CHARS - 20]
        self.rng = np.random.default_rng(0)

    def batch(self, identity, pairs: list[tuple[int, int]], texts: list[str], confidence: float = 0.7,
              now_ms: int | None = None, space: int = 0) -> bytes:
        return self.signed(identity, self.encoder.vectors(pairs, space), texts, confidence, now_ms)

    def signed(self, identity, vectors: np.ndarray, texts: list[str], confidence: float = 0.7,
               now_ms: int | None = None) -> bytes:
        """One signed batch of ``texts`` with these codes, whatever the texts encode to."""
        exps = [Experience(t, DOMAIN, confidence) for t in texts]
        return make_batch(exps, vectors, self.profile, identity, timestamp_ms=now_ms).to_msgpack()

    def honest_batches(self, docs: np.ndarray, per_batch: int) -> list[tuple[bytes, set[tuple[str, str]]]]:
        """Batches of ``per_batch`` docs dealt round-robin to the honest peers, with the rows each sends."""
        out = []
        for b, start in enumerate(range(0, len(docs), per_batch)):
            peer = self.honest[b % HONEST_PEERS]
            mine = docs[start : start + per_batch].tolist()
            texts = [self.docs[i] for i in mine]
            sent = {(Experience(t, DOMAIN).id, peer.node_id) for t in texts}
            out.append((self.batch(peer, [(i, -1) for i in mine], texts), sent))
        return out

    def hostile(self, identity, n: int, tag: str) -> bytes:
        """One signed batch of ``n`` plausible rows: each an honest sentence tagged, encoded as a mix of two."""
        a = self.rng.choice(self.short, size=n, replace=n > len(self.short))
        b = self.rng.choice(len(self.docs), size=n)
        texts = [self.encoder.learn(f"{self.docs[i]} ({tag} {j})", int(i), int(k))
                 for j, (i, k) in enumerate(zip(a, b))]
        return self.batch(identity, list(zip(a.tolist(), b.tolist())), texts, confidence=1.0)


class Peak:
    """The process's peak resident memory, sampled every 20 ms on a thread while running."""

    def __init__(self):
        # psutil comes with the bench extra only
        import psutil

        self._proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> "Peak":
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


async def searching(node, queries: np.ndarray, stop: asyncio.Event, clients: int = CLIENTS) -> list[float]:
    """``clients`` agents searching the node back to back until ``stop``; every search's seconds."""
    latencies: list[float] = []

    async def client(c: int) -> None:
        rng = np.random.default_rng(c)
        while not stop.is_set():
            t = time.perf_counter()
            await node.search(vector=queries[rng.integers(len(queries))])
            latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies


def _ms(latencies: list[float], q: float) -> float:
    return round(1000 * float(np.quantile(latencies, q)), 1) if latencies else float("nan")


async def earn_trust(node, bench: Bench, docs: np.ndarray) -> int:
    """Agents search for what the honest peers taught and report their lessons helped (through
    `Node.record_outcome`, as `POST /outcomes` does), until every honest peer is trusted: trust
    comes from outcomes. Only hits wholly from honest peers are judged; the attackers'
    lessons get no outcome. Returns the searches made."""
    honest = {p.node_id for p in bench.honest}
    for n, i in enumerate(docs.tolist()):
        if all(node.soup.reputation.get(k) >= TRUSTED_FLOOR for k in honest):
            return n
        hits = await node.search(vector=bench.encoder.vectors([(i, -1)])[0], min_similarity=0.0)
        judged = [h for h in hits if h.sources and set(h.sources) <= honest]
        if judged:
            await node.record_outcome(judged, True)
    return len(docs)


async def _lure_top_hits(node, plan: Plan) -> int:
    """How many of the lying rows' questions find a lying row first."""
    lying_ids = {i for i, _ in plan.lying}
    tops = [await node.search(vector=q, k=1, min_similarity=0.0) for q in plan.lures]
    return sum(bool(hits) and hits[0].experience.id in lying_ids for hits in tops)


async def run_attack(bench: Bench, sizes: Sizes, name: str) -> dict:
    """One attack against a fresh node; see the module doc for what is measured."""
    deal = bench.rng.permutation(len(bench.docs))
    n_warm = HONEST_PEERS * WARMUP_BATCHES * sizes.honest_rows
    warm = bench.honest_batches(deal[:n_warm], sizes.honest_rows)
    during = bench.honest_batches(deal[n_warm : n_warm + HONEST_PEERS], 1)  # one more single-row batch each
    free = n_warm + HONEST_PEERS  # the first doc no honest peer sends, and how many they send
    plan = attack(name, "node").plan(NodeView(bench, sizes, deal, free, free))
    if not plan.warm_up:
        warm, during = [], []
    hostile, tombstones = plan.hostile, plan.tombstones

    subject = subject_for("dso", "batch", DOMAIN)
    with tempfile.TemporaryDirectory(prefix="dso-node-attacks-") as tmp:
        config = NodeConfig(Path(tmp), encoder=None, dim=DIM, encoder_id=bench.profile.encoder_id, batch_interval_s=3600)
        if plan.capacity is not None:
            config = replace(config, capacity=plan.capacity)
        # the attacked node is a fleet of one; the honest peers and the attacker send on its other connection
        fleet = await InProcessFleet.open([config], [NodeIdentity.from_seed(b"node-attacks-observer")],
                                          encoder=bench.encoder, profile=bench.profile)
        node, sender = fleet.nodes[0], fleet.attacker
        honest_keys = {p.node_id for p in bench.honest} | plan.honest_keys
        filtered: set[tuple[str, str]] = set()  # honest rows the round's content filter refused
        node.on_round = lambda r: filtered.update((eid, nid) for nid, eid, _ in r.rejected if nid in honest_keys)
        await fleet.listen()
        for payload in [p for p, _ in warm] + plan.history:
            await sender.publish(payload, subject)
        await fleet.settle(timeout_s=600)
        outcome_searches = await earn_trust(node, bench, deal[:n_warm]) if warm else 0
        trusted = sum(node.soup.reputation.get(p.node_id) >= TRUSTED_FLOOR for p in bench.honest)
        filtered_before = len(filtered)
        held_before = set(node.library.db.execute("SELECT id, signer FROM experiences").fetchall())

        stop = asyncio.Event()
        clients = asyncio.create_task(searching(node, bench.queries, stop))
        await asyncio.sleep(sizes.baseline_s)
        stop.set()
        quiet = await clients

        stop = asyncio.Event()
        with Peak() as peak:
            before = peak.peak
            clients = asyncio.create_task(searching(node, bench.queries, stop))
            t = time.perf_counter()
            mixed = [(p, False) for p, _ in during + plan.honest] + [(p, True) for p in hostile]
            order = range(len(mixed)) if plan.in_order else bench.rng.permutation(len(mixed))
            for i in order:
                await sender.publish(mixed[i][0], subject)
                if plan.lone:
                    await fleet.settle(timeout_s=600)
            for tomb in tombstones:
                await sender.publish(tomb, subject_for("dso", "tombstone", DOMAIN))
            await fleet.settle(timeout_s=1800)
            attack_s = time.perf_counter() - t
            stop.set()
            loud = await clients
        held = set(node.library.db.execute("SELECT id, signer FROM experiences").fetchall())
        sent = set().union(*(s for _, s in warm + during + plan.honest))
        hostile_keys = {a.node_id for a in plan.attackers}
        result = {
            "attack": name, "attacker_keys": len(plan.attackers), "attacker_batches": len(hostile),
            "attacker_rows_sent": sum(len(msgpack.unpackb(msgpack.unpackb(p)[0])["rows"]) for p in hostile),
            "attacker_rows": sum(s in hostile_keys for _, s in held),
            "honest_rows_sent": len(sent), "honest_rows_lost": len(sent - held - filtered),
            "honest_rows_filtered": len(filtered), "honest_rows_filtered_during": len(filtered) - filtered_before,
            "honest_peers_trusted": trusted, "outcome_searches": outcome_searches,
            "honest_min_reputation": round(min(node.soup.reputation.get(k) for k in {k for _, k in sent}), 3),
            "rss_before_mb": round(before / 2**20),
            "rss_growth_mb": round((peak.peak - before) / 2**20), "attack_seconds": round(attack_s, 1),
            "searches_during": len(loud), "search_p50_ms": _ms(loud, 0.5), "search_p99_ms": _ms(loud, 0.99),
            "search_max_ms": _ms(loud, 1.0), "searches_quiet": len(quiet), "quiet_p50_ms": _ms(quiet, 0.5),
            "quiet_p99_ms": _ms(quiet, 0.99),
            "load_average_1min": round(os.getloadavg()[0], 1),  # the machine is shared: how busy it was
        }
        if plan.capacity is not None:
            result["capacity"] = plan.capacity
        if plan.lying:
            result |= {"lying_rows_sent": len(plan.lying), "lying_rows_admitted": len(plan.lying & held),
                       "lying_top_hits": await _lure_top_hits(node, plan)}
        if name == "deferred fill":
            n, size = node.library.db.execute("SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) "
                                              "FROM deferred").fetchone()
            result |= {"deferred_batches": n, "deferred_mb": round(size / 2**20, 1)}
        if plan.victim_key is not None:  # the author's row, before the copy and after the copier's tombstone
            result["victim_row_held"] = [plan.victim_key in held_before, plan.victim_key in held]
        await fleet.close()
    return result


ATTACKS = names("node")


def run(quick: bool, docs, doc_vectors: np.ndarray, query_vectors: np.ndarray, encoder_id: str,
        attacks=ATTACKS) -> dict:
    """Every attack in turn; the rows and the limits they are read against."""
    sizes = Sizes.of(quick)
    bench = Bench(encoder_id, tuple(docs), doc_vectors, query_vectors)
    with serving() as blas_threads:  # as in a `dso node start` process
        rows = [asyncio.run(run_attack(bench, sizes, name)) for name in attacks]
    soup = DeltaSoupConfig()
    return {"rows": rows, "sizes": sizes.__dict__, "clients": CLIENTS, "dim": DIM, "blas_threads": blas_threads,
            "limits": {"new_keys_per_window": soup.new_keys_per_window, "new_key_rate_limit": soup.new_key_rate_limit,
                       "new_key_row_limit": soup.new_key_row_limit, "new_key_free_rows": soup.new_key_free_rows,
                       "new_keys_row_limit": soup.new_keys_row_limit,
                       "rate_window_ms": soup.rate_window_ms, "max_batch_experiences": soup.max_batch_experiences,
                       "capacity": NodeConfig(Path(".")).capacity, "deferred_bytes": DEFERRED_BYTES,
                       "deferred_key_bytes": DEFERRED_KEY_BYTES, "deferred_new_keys_bytes": DEFERRED_NEW_KEYS_BYTES}}
