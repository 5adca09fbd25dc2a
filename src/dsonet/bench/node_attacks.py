"""Attacks on the node (issue 14): hostile peers against one real `Node`, while agents search it.

Each attack gets a fresh node (its SQLite library, DeltaSoup at the production defaults, the
library's merge) on an in-process log: the code path of `dso node start` minus NATS and HTTP,
as in `dsonet.sim.fleet`. First 12 honest peers publish GSM8K solution sentences (6 batches
each, so they become trusted, as long-running peers are); then 20 concurrent clients search
the node while nothing else happens (the baseline), then again while the attacker publishes,
interleaved with one more batch from every honest peer. Reported per attack:

- ``attacker_rows``: rows of the attacker's keys in the library once the node has read everything;
- ``honest_rows_lost``: honest (id, signer) rows sent and not in the library, other than those the
  round's content filter refused (target 0); ``honest_rows_filtered``: those (the median rule's
  false positives, attack or not; ``_during``: in the rounds of the attack);
- ``rss_growth_mb``: the process's peak resident memory during the attack over the baseline;
- search latency p50 / p99 (ms) with 20 concurrent clients, during the attack and without it.

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
  before issue 24 the queue was counted, not weighed (up to 100 payloads a key, 745 MB for the
  finding's 5 keys) and read whole at every pass. Reported: ``deferred_batches`` and
  ``deferred_mb`` held once the node has read everything.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

DIM = 7680
HONEST_PEERS = 12
WARMUP_BATCHES = 6  # rep 0.5 → 1 − 0.5·0.9⁶ = 0.73 ≥ 0.7: trusted after six admitted batches
CLIENTS = 20
TRUSTED_FLOOR = 0.7
FILL_KEYS = 5


@dataclass(frozen=True)
class Sizes:
    volume_keys: int
    volume_rows: int
    sybil_keys: int
    honest_rows: int  # rows per honest warm-up batch
    baseline_s: float  # how long the clients search with no attack
    fill_batches: int  # batches of `volume_rows` rows from each of `FILL_KEYS` keys in the deferred fill

    @classmethod
    def of(cls, quick: bool) -> "Sizes":
        return cls(6, 1000, 1500, 10, 1.0, 6) if quick else cls(40, 1000, 5000, 20, 4.0, 100)


class BenchEncoder:
    """The node's encoder in this benchmark: each text the bench sends maps to the vector its
    sender encoded (see the module doc); any other text is refused."""

    def __init__(self, encoder_id: str, lift: np.ndarray, base: np.ndarray):
        self.id, self.dim = encoder_id, lift.shape[0]
        self._lift, self._base = lift, base  # (d, 384) orthonormal columns; (n, 384) MiniLM vectors
        self._mix: dict[str, tuple[int, int]] = {}  # text -> (doc, doc mixed in, or -1)

    def learn(self, text: str, doc: int, mixed: int = -1) -> str:
        from dsonet.experience import normalise_text

        text = normalise_text(text)  # what an experience holds, and so what re-encoding asks for
        self._mix[text] = (doc, mixed)
        return text

    def vectors(self, pairs: list[tuple[int, int]]) -> np.ndarray:
        a = np.array([p[0] for p in pairs])
        b = np.array([p[1] for p in pairs])
        x = self._base[a] + np.where(b[:, None] >= 0, 0.5 * self._base[np.maximum(b, 0)], 0.0)
        x = (x @ self._lift.T).astype(np.float32)  # (n, d)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def encode(self, texts, kind="document") -> np.ndarray:
        unknown = [t for t in texts if t not in self._mix]
        if unknown:
            raise KeyError(f"the bench never sent {unknown[0][:60]!r}")
        return self.vectors([self._mix[t] for t in texts])


class Bench:
    """The shared material: texts, vectors, the profile, honest identities."""

    def __init__(self, encoder_id: str, docs: tuple[str, ...], doc_vectors: np.ndarray, query_vectors: np.ndarray):
        from dsonet.codec import default_profile
        from dsonet.experience import MAX_TEXT_CHARS
        from dsonet.identity import NodeIdentity

        q, _ = np.linalg.qr(np.random.default_rng(1234).standard_normal((DIM, doc_vectors.shape[1])))
        lift = q.astype(np.float32)
        self.docs = docs
        self.encoder = BenchEncoder(f"{encoder_id}-lifted{DIM}", lift, doc_vectors)
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
              now_ms: int | None = None) -> bytes:
        from dsonet.codec import make_batch
        from dsonet.experience import Experience
        from dsonet.sim.corpus import DOMAIN

        exps = [Experience(t, DOMAIN, confidence) for t in texts]
        return make_batch(exps, self.encoder.vectors(pairs), self.profile, identity, timestamp_ms=now_ms).to_msgpack()

    def honest_batches(self, docs: np.ndarray, per_batch: int) -> list[tuple[bytes, set[tuple[str, str]]]]:
        """Batches of ``per_batch`` docs dealt round-robin to the honest peers, with the rows each sends."""
        from dsonet.experience import Experience
        from dsonet.sim.corpus import DOMAIN

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


def poisoned(bench: Bench, identity) -> bytes:
    """A batch signed by ``identity`` whose one row has a scale of 3e38 (no unit vector's code has
    one): built as a valid batch, then its content changed and signed again, as an attacker would."""
    from dsonet.codec.batch import scale_bound

    payload = bench.hostile(identity, 1, "poisoned")
    content, _ = msgpack.unpackb(payload)
    fields = msgpack.unpackb(content)
    code = bytearray(fields["rows"][0][5])
    n_scales = int(scale_bound(bench.profile).size)
    code[len(code) - 4 * n_scales:] = np.full(n_scales, 3e38, "<f4").tobytes()
    fields["rows"][0][5] = bytes(code)
    content = msgpack.packb(fields, use_bin_type=True)
    return msgpack.packb([content, identity.sign(hashlib.sha256(content).hexdigest().encode())], use_bin_type=True)


class Peak:
    """The process's peak resident memory, sampled every 20 ms on a thread while running."""

    def __init__(self):
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


async def run_attack(bench: Bench, sizes: Sizes, name: str) -> dict:
    """One attack against a fresh node; see the module doc for what is measured."""
    from dsonet.identity import NodeIdentity
    from dsonet.network.node import Node, NodeConfig
    from dsonet.network.tombstone import make_tombstone
    from dsonet.network.transport import InProcessHub, subject_for
    from dsonet.sim.corpus import DOMAIN

    hub = InProcessHub()
    deal = bench.rng.permutation(len(bench.docs))
    n_warm = HONEST_PEERS * WARMUP_BATCHES * sizes.honest_rows
    warm = bench.honest_batches(deal[:n_warm], sizes.honest_rows)
    during = bench.honest_batches(deal[n_warm : n_warm + HONEST_PEERS], 1)  # one more single-row batch each
    attackers: list = []
    tombstones: list[bytes] = []
    victim_key = None
    if name == "volume":
        attackers = [NodeIdentity.from_seed(f"volume-{i}".encode()) for i in range(sizes.volume_keys)]
        hostile = [bench.hostile(a, sizes.volume_rows, f"v{i}") for i, a in enumerate(attackers)]
    elif name == "sybil":
        attackers = [NodeIdentity.from_seed(f"sybil-{i}".encode()) for i in range(sizes.sybil_keys)]
        hostile = [bench.hostile(a, 1, f"s{i}") for i, a in enumerate(attackers)]
    elif name == "poisoned batch":
        attackers = [NodeIdentity.from_seed(b"poisoner")]
        hostile = [poisoned(bench, attackers[0])]
    elif name == "takeover":
        from dsonet.experience import Experience

        attackers = [NodeIdentity.from_seed(b"taker")]
        victim = int(deal[0])  # sent by honest peer 0 in the warm-up
        victim_key = (Experience(bench.docs[victim], DOMAIN).id, bench.honest[0].node_id)
        hostile = [bench.batch(attackers[0], [(victim, -1)], [bench.docs[victim]], confidence=1.0)]
        tombstones = [make_tombstone([Experience(bench.docs[victim], DOMAIN).id], attackers[0]).to_msgpack()]
    elif name == "deferred fill":  # each key's first batch first: admitted once, then the rest over its rate
        attackers = [NodeIdentity.from_seed(f"fill-{i}".encode()) for i in range(FILL_KEYS)]
        hostile = [bench.hostile(a, sizes.volume_rows, f"f{i}-{j}") for j in range(sizes.fill_batches)
                   for i, a in enumerate(attackers)]
    else:
        raise ValueError(f"attack: {name!r} is not one of {ATTACKS}")

    subject = subject_for("dso", "batch", DOMAIN)
    with tempfile.TemporaryDirectory(prefix="dso-node-attacks-") as tmp:
        node = await Node.open(NodeConfig(Path(tmp), encoder=None, dim=DIM, encoder_id=bench.profile.encoder_id,
                                          batch_interval_s=3600), hub.transport(),
                               NodeIdentity.from_seed(b"node-attacks-observer"), encoder=bench.encoder,
                               profile=bench.profile)
        honest_keys = {p.node_id for p in bench.honest}
        filtered: set[tuple[str, str]] = set()  # honest rows the round's content filter refused
        node.on_round = lambda r: filtered.update((eid, nid) for nid, eid, _ in r.rejected if nid in honest_keys)
        await node.start()
        sender = hub.transport()
        for payload, _ in warm:
            await sender.publish(payload, subject)
        await hub.drained([node.durable], timeout_s=600)
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
            mixed = [(p, False) for p, _ in during] + [(p, True) for p in hostile]
            in_order = name in ("poisoned batch", "deferred fill")
            order = range(len(mixed)) if in_order else bench.rng.permutation(len(mixed))
            for i in order:  # the poisoned batch and the 12 honest ones go out together: one read
                await sender.publish(mixed[i][0], subject)
            for tomb in tombstones:
                await sender.publish(tomb, subject_for("dso", "tombstone", DOMAIN))
            await hub.drained([node.durable], timeout_s=1800)
            attack_s = time.perf_counter() - t
            stop.set()
            loud = await clients
        held = set(node.library.db.execute("SELECT id, signer FROM experiences").fetchall())
        sent = set().union(*(s for _, s in warm + during))
        hostile_keys = {a.node_id for a in attackers}
        result = {
            "attack": name, "attacker_keys": len(attackers), "attacker_batches": len(hostile),
            "attacker_rows_sent": sum(len(msgpack.unpackb(msgpack.unpackb(p)[0])["rows"]) for p in hostile),
            "attacker_rows": sum(s in hostile_keys for _, s in held),
            "honest_rows_sent": len(sent), "honest_rows_lost": len(sent - held - filtered),
            "honest_rows_filtered": len(filtered), "honest_rows_filtered_during": len(filtered) - filtered_before,
            "honest_peers_trusted": trusted, "rss_before_mb": round(before / 2**20),
            "rss_growth_mb": round((peak.peak - before) / 2**20), "attack_seconds": round(attack_s, 1),
            "searches_during": len(loud), "search_p50_ms": _ms(loud, 0.5), "search_p99_ms": _ms(loud, 0.99),
            "search_max_ms": _ms(loud, 1.0), "searches_quiet": len(quiet), "quiet_p50_ms": _ms(quiet, 0.5),
            "quiet_p99_ms": _ms(quiet, 0.99),
            "load_average_1min": round(os.getloadavg()[0], 1),  # the machine is shared: how busy it was
        }
        if name == "deferred fill":
            n, size = node.library.db.execute("SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) "
                                              "FROM deferred").fetchone()
            result |= {"deferred_batches": n, "deferred_mb": round(size / 2**20, 1)}
        if victim_key is not None:  # the author's row, before the copy and after the copier's tombstone
            result["victim_row_held"] = [victim_key in held_before, victim_key in held]
        await sender.close()
        await node.close()
    return result


ATTACKS = ("volume", "sybil", "poisoned batch", "takeover", "deferred fill")


def run(quick: bool, docs, doc_vectors: np.ndarray, query_vectors: np.ndarray, encoder_id: str,
        attacks=ATTACKS) -> dict:
    """Every attack in turn; the rows and the limits they are read against."""
    from dsonet.aggregate import DeltaSoupConfig
    from dsonet.network.ingest import DEFERRED_BYTES, DEFERRED_KEY_BYTES, DEFERRED_NEW_KEYS_BYTES
    from dsonet.network.node import NodeConfig

    from dsonet.network.access import serving

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
