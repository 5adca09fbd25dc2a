"""`dso bench retrieval`: top-10 search over BitDelta codes at d = 7680, beside faiss.

Vectors. Real: all-MiniLM-L6-v2 (384 dims) over `dsonet.data.corpus_texts()` (GSM8K questions,
solutions and sentences), lifted to 7680 dims by a fixed seeded random orthogonal map (the
Zen head is not used here). Synthetic, for sizes past the corpus: deterministic Gaussian draws
matching the real vectors' mean and covariance in 384 dims, L2-normalised, then lifted the
same way. Queries: 200 corpus texts held out of every library. Because the lift is an
isometry, exact float top-10 is computed in 384 dims, at every size.

Indexes, measured in the same run, one query at a time:
  dsonet           the library's CodeIndex in the default profile (rotated BitDelta, g = d):
                   codes made in batches of 1,000 (each with its own baseline, as they arrive
                   from the network); coarse pass over a 64-byte principal-direction sketch of
                   each code (int8, scanned in C), then the κ-corrected asymmetric estimate of
                   q·e on 2,048 candidates, or 1/32 of the library past 65k, then stage 2b where
                   the library's deltas lie in few directions (the Zen space's do, the lift's
                   384 do not): the best 20 re-decoded consistently with their signs inside the
                   128 principal directions learned from the codes. `CodeIndex.search`, what
                   `Library.rank` runs for a node's search. Nothing is decompressed in full.
  dsonet-support   the same, plus stage 3 (`library.index.stages.Support`): the best 20 candidates
                   decoded again knowing the subspace the encoder's outputs lie in (here the
                   lift's 384 dimensions; the Zen head's lie in d_hidden + 2). Codes only; its
                   bytes include the 11.8 MB basis, which is the encoder's, spread over n.
  dsonet-full-scan the κ estimate alone over every code (no coarse stage, no stage 2b): what the
                   linear estimate of the 964-byte codes allows.
  dsonet-own       a real SQLite `Library` of experiences this node encoded itself (n ≤ 100k):
                   the same codes in memory, the float vectors in the file, and the best
                   64 candidates rescored exactly from it (`Library.rank`). What a node gets
                   for its own experiences; peers' experiences arrive as codes only.
  faiss-flat-ip    faiss IndexFlatIP over float32 (only where 7680-dim floats fit: n ≤ 100k).
  faiss-binary     faiss IndexBinaryFlat over the plain sign bits of e (960 bytes, no scale).
  faiss-rabitq     faiss IndexRaBitQ (1-bit RaBitQ codes of e minus the centroid it trains, with
  (-qb8)           8 bytes of factors: 968 bytes), inner product; the query quantised to 4 bits
                   (faiss's default) or 8. What a user would pick instead for 1-bit search. It
                   applies no rotation of its own (a dense 7680² one would cost 59 Mflop a vector).

The default space (rows with space = "zen"): the same rows, but through the protocol's encoder
instead of the lift: the real MiniLM vectors, then the synthetic draws, each passed through the
shipped Zen head (`encoder.head.project`); queries likewise. Codes are made as a node makes them
in protocol v2, against the profile's fixed baseline (`encoder.baseline`), in batches of 1,000.
Exact top-10 is computed in 7680 dims as the rows are made. Rows dsonet-zen (codes only:
the node's path, stage 2b included), dsonet-zen-support (+ the head's support, 290 dims),
faiss-binary and faiss-rabitq as above.
bytes_per_experience: bytes the index holds in memory per experience (codes + scales +
bookkeeping; the text is extra). disk_bytes_per_experience: the SQLite library file, text and
all, divided by n (dsonet: built by ingesting signed batches at 10k; dsonet-own: with floats).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import click
import numpy as np

from dsonet.bench.report import RESULTS_DIR, format_table, write_results
from dsonet.codec import Profile, compress, default_profile, make_batch
from dsonet.codec.batch import DEFAULT_ROTATION_SEED
from dsonet.data import corpus_texts
from dsonet.encoders import default_encoder, minilm
from dsonet.encoders.cache import cached_encode
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.library.index.code_index import CodeIndex

DIM = 7680
BATCH = 1000
N_QUERIES = 200
FLAT_QUERIES = 40  # faiss-flat-ip queries past 10k
OVERSAMPLE = 2048  # candidates rescored, as the library does
RABITQ_TRAIN = 10_000  # rows faiss's RaBitQ computes its centroid from
SYNTHETIC_BLOCK = 1000  # synthetic rows are drawn in blocks of this many, one seed per block
OWN_MAX = 100_000  # the dsonet-own library holds 30 KB of floats per experience on disk
LIFT_SEED = 1234  # the same lift as `dso bench codec`
TARGETS = {"p50_ms_100k": 20, "p50_ms_1m": 150, "recall_at_10": 0.95, "bytes_per_experience": 1200}


def _real_vectors() -> tuple[list[str], np.ndarray]:
    texts = corpus_texts()
    return texts, cached_encode(minilm(), texts, "document")


def _lift_map(k: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(LIFT_SEED).standard_normal((DIM, k)))
    return q.T.astype(np.float32)  # (k, DIM), orthonormal rows


class Corpus:
    """Library rows 0..n-1 in 384 dims: the real vectors first, then synthetic ones, made in chunks."""

    def __init__(self, real: np.ndarray):
        self.real = real
        mean = real.mean(0)
        cov = np.cov(real, rowvar=False)
        self.mean, self.chol = mean, np.linalg.cholesky(cov + 1e-8 * np.eye(len(mean)))

    def chunk(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1: the same rows however the range is cut, so the library (built a batch
        at a time) and the exact top-10 (computed 100k rows at a time) see the same vectors."""
        out = []
        if start < len(self.real):
            out.append(self.real[start : min(stop, len(self.real))])
        if stop > len(self.real):
            # synthetic row i is row i % SYNTHETIC_BLOCK of block i // SYNTHETIC_BLOCK, each block its own seed
            first, last = max(start, len(self.real)) - len(self.real), stop - len(self.real)
            blocks = range(first // SYNTHETIC_BLOCK, -(-last // SYNTHETIC_BLOCK))
            z = np.concatenate([self._block(b) for b in blocks])
            offset = blocks[0] * SYNTHETIC_BLOCK
            out.append(z[first - offset : last - offset])
        return np.concatenate(out)

    def _block(self, b: int) -> np.ndarray:
        z = np.random.default_rng(b).standard_normal((SYNTHETIC_BLOCK, len(self.mean))) @ self.chol.T + self.mean
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)


def _exact_top10(queries: np.ndarray, corpus: Corpus, n: int) -> np.ndarray:
    best_s = np.full((len(queries), 10), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 10), np.int64)
    for start in range(0, n, 100_000):
        x = corpus.chunk(start, min(n, start + 100_000))
        s = queries @ x.T
        cat_s = np.concatenate([best_s, s], 1)
        cat_i = np.concatenate([best_i, np.arange(start, start + len(x))[None, :].repeat(len(queries), 0)], 1)
        top = np.argpartition(-cat_s, 10, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(cat_s, top, 1), np.take_along_axis(cat_i, top, 1)
    return best_i


def _recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[:10].tolist()) & set(t.tolist())) / 10 for f, t in zip(found, truth)]))


def _timed(fn, queries: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    fn(queries[0])  # warm-up
    found, times = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(fn(q))
        times.append(time.perf_counter() - t)
    return found, np.array(times) * 1000


def _row(name: str, n: int, times: np.ndarray, recall: float, nbytes: float, **extra) -> dict:
    return {"index": name, "n": n, "dim": DIM, "p50_ms": float(np.median(times)),
            "p95_ms": float(np.percentile(times, 95)), "qps": float(1000 / times.mean()),
            "recall_at_10": round(recall, 4), "bytes_per_experience": round(nbytes, 1), **extra}


def bench_size(n: int, corpus: Corpus, queries384: np.ndarray, lift: np.ndarray) -> list[dict]:
    import faiss

    truth = _exact_top10(queries384, corpus, n)
    queries = queries384 @ lift  # (Q, DIM)
    ours = CodeIndex(DIM, DIM, DEFAULT_ROTATION_SEED, support=lift)
    binary = faiss.IndexBinaryFlat(DIM)
    rabitq = _rabitq(corpus.chunk(0, min(n, RABITQ_TRAIN)) @ lift)
    flat = faiss.IndexFlatIP(DIM) if n <= 100_000 else None
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):  # never more than BATCH float vectors at d = 7680
        x = corpus.chunk(start, min(n, start + BATCH)) @ lift
        codes = compress(x, DIM, rotation_seed=DEFAULT_ROTATION_SEED)
        b = ours.add_baseline(codes.baseline)
        ours.add(codes.signs, codes.scales, np.full(len(x), b, np.int32))
        binary.add(np.packbits(x > 0, axis=1, bitorder="little"))
        rabitq.add(x)
        if flat is not None:
            flat.add(x)
    build_s = time.perf_counter() - t0

    def ours_fn(q):
        return ours.search(q, 10, OVERSAMPLE, refine=False)[0]

    def binary_fn(q):
        return binary.search(np.packbits(q[None, :] > 0, axis=1, bitorder="little"), 10)[1][0]

    rows = []
    plain_bytes = (ours.memory_bytes() - ours.support.memory_bytes()) / n  # dsonet does not use the basis
    found, ms = _timed(ours_fn, queries)
    rows.append(_row("dsonet", n, ms, _recall(found, truth), plain_bytes, build_s=round(build_s, 1)))
    found, ms = _timed(lambda q: ours.search(q, 10, OVERSAMPLE)[0], queries)
    # the support basis is the encoder's (k·d floats), the same for any library size
    rows.append(_row("dsonet-support", n, ms, _recall(found, truth), ours.memory_bytes() / n,
                     support_bytes=ours.support.memory_bytes()))
    # the same estimate over every row: what the codes allow, without the coarse stage
    found, ms = _timed(lambda q: np.argsort(-ours.score(q))[:10], queries)
    rows.append(_row("dsonet-full-scan", n, ms, _recall(found, truth), plain_bytes))
    if n <= OWN_MAX:
        rows.append(_own_row(n, corpus, queries, truth, lift))
    found, ms = _timed(binary_fn, queries)
    rows.append(_row("faiss-binary", n, ms, _recall(found, truth), DIM / 8))
    rows += _rabitq_rows(rabitq, n, queries, truth)
    if flat is not None:  # exhaustive float search costs ~n·d per query: fewer queries at large n
        few = N_QUERIES if n <= 10_000 else FLAT_QUERIES
        found, ms = _timed(lambda q: flat.search(q[None, :], 10)[1][0], queries[:few])
        rows.append(_row("faiss-flat-ip", n, ms, _recall(found, truth[:few]), DIM * 4, queries=few))
    return rows


def _rabitq(train: np.ndarray):
    import faiss

    index = faiss.IndexRaBitQ(DIM, faiss.METRIC_INNER_PRODUCT)
    index.train(train)  # the centroid its codes are taken against
    return index


def _rabitq_rows(index, n: int, queries: np.ndarray, truth: np.ndarray, **extra) -> list[dict]:
    import faiss

    rows = []
    for name, qb in (("faiss-rabitq", 4), ("faiss-rabitq-qb8", 8)):
        params = faiss.RaBitQSearchParameters()
        params.qb = qb
        found, ms = _timed(lambda q: index.search(q[None, :], 10, params=params)[1][0], queries)
        rows.append(_row(name, n, ms, _recall(found, truth), index.code_size, **extra))
    return rows


class _TopK:
    """Exact top-k of every query over rows that arrive a chunk at a time."""

    def __init__(self, n_queries: int, k: int = 10):
        self.scores = np.full((n_queries, k), -np.inf, np.float32)
        self.rows = np.zeros((n_queries, k), np.int64)

    def update(self, scores: np.ndarray, first_row: int) -> None:
        k = self.scores.shape[1]
        cat_s = np.concatenate([self.scores, scores], 1)
        cat_i = np.concatenate([self.rows, np.broadcast_to(np.arange(first_row, first_row + scores.shape[1]), scores.shape)], 1)
        top = np.argpartition(-cat_s, k, axis=1)[:, :k]
        self.scores, self.rows = np.take_along_axis(cat_s, top, 1), np.take_along_axis(cat_i, top, 1)


def zen_size(n: int, corpus: Corpus, queries384: np.ndarray) -> list[dict]:
    """The protocol's default space at n rows: `corpus` rows (real, then synthetic) through the shipped
    Zen head, coded against the profile's fixed baseline; searched by our index and by faiss's."""
    import faiss

    encoder = default_encoder()
    head, baseline = encoder.head, encoder.baseline
    queries = head.project(queries384)  # (Q, DIM): MiniLM's query and document encodings are the same
    ours = CodeIndex(DIM, DIM, DEFAULT_ROTATION_SEED, support=encoder.support())
    b = ours.add_baseline(baseline)
    binary = faiss.IndexBinaryFlat(DIM)
    rabitq = _rabitq(head.project(corpus.chunk(0, min(n, RABITQ_TRAIN))))
    truth = _TopK(len(queries))
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        x = head.project(corpus.chunk(start, min(n, start + BATCH)))  # (≤ BATCH, DIM)
        truth.update(queries @ x.T, start)
        codes = compress(x, DIM, baseline=baseline, rotation_seed=DEFAULT_ROTATION_SEED)
        ours.add(codes.signs, codes.scales, np.full(len(x), b, np.int32))
        binary.add(np.packbits(x > 0, axis=1, bitorder="little"))
        rabitq.add(x)
    build_s = time.perf_counter() - t0
    rows = []
    for name, refine in (("dsonet-zen", False), ("dsonet-zen-support", True)):
        found, ms = _timed(lambda q: ours.search(q, 10, OVERSAMPLE, refine=refine)[0], queries)
        nbytes = ours.memory_bytes() - (0 if refine else ours.support.memory_bytes())
        rows.append(_row(name, n, ms, _recall(found, truth.rows), nbytes / n, space="zen", build_s=round(build_s, 1)))
    found, ms = _timed(lambda q: binary.search(np.packbits(q[None, :] > 0, axis=1, bitorder="little"), 10)[1][0], queries)
    rows.append(_row("faiss-binary", n, ms, _recall(found, truth.rows), DIM / 8, space="zen"))
    rows += _rabitq_rows(rabitq, n, queries, truth.rows, space="zen")
    return rows


def _own_row(n: int, corpus: Corpus, queries: np.ndarray, truth: np.ndarray, lift: np.ndarray) -> dict:
    """`Library.rank` over a library this node encoded itself: codes in memory, floats in the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "own.sqlite")
        with Library(path, encoder=_NoEncoder(), profile=default_profile(DIM, _NoEncoder.id)) as lib:
            corpus_row = {}
            for start in range(0, n, BATCH):
                exps = [Experience(f"own experience #{i}", "math") for i in range(start, min(n, start + BATCH))]
                corpus_row.update((e.id, i) for i, e in enumerate(exps, start))
                lib.add_vectors(exps, corpus.chunk(start, start + len(exps)) @ lift)
            lib.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            found, ms = _timed(lambda q: np.array([corpus_row[lib.search_index.ids[r]] for r in lib.rank(q, 10)[0][:10]]), queries)
            memory = lib.search_index.memory_bytes() / n
            return _row("dsonet-own", n, ms, _recall(found, truth), memory,
                        disk_bytes_per_experience=round(os.path.getsize(path) / n, 1))


def disk_per_experience(corpus: Corpus, texts: list[str], lift: np.ndarray, n: int) -> float:
    """Build a real SQLite library of n experiences from signed batches; file bytes / n."""
    profile = Profile(DIM, DIM, "st:all-MiniLM-L6-v2+lift7680")
    ident = NodeIdentity.generate()
    with tempfile.TemporaryDirectory() as tmp:
        with Library(os.path.join(tmp, "lib.sqlite"), encoder=_NoEncoder(), profile=profile) as lib:
            for start in range(0, n, BATCH):
                stop = min(n, start + BATCH)
                exps = [Experience(" ".join(texts[i].split()[:31])[:490] + f" #{i}", "math") for i in range(start, stop)]
                lib.ingest(make_batch(exps, corpus.chunk(start, stop) @ lift, profile, ident))
            lib.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return lib.stats()["file_bytes"] / n


class _NoEncoder:
    """The disk measurement ingests pre-encoded batches; nothing is encoded."""

    dim = DIM
    id = "st:all-MiniLM-L6-v2+lift7680"

    def encode(self, texts, kind="document"):
        raise RuntimeError("the retrieval benchmark does not encode text")


@click.command()
@click.option("--quick", is_flag=True, help="10k experiences only (about a minute).")
@click.option("--sizes", default="10000,100000", show_default=True,
              help="Library sizes, comma-separated; add 1000000 for the 1M run (several more minutes, ~1.1 GB).")
@click.option("--threads", type=int, default=2, show_default=True, help="faiss/BLAS threads (targets are for 2 cores).")
@click.option("--add", "add_sizes", is_flag=True,
              help="Keep the rows of other sizes from bench/results/retrieval.json (run 1M on its own, later).")
def cli(quick: bool, sizes: str, threads: int, add_sizes: bool) -> None:
    """Top-10 search over BitDelta codes (d = 7680) beside faiss IndexFlatIP and IndexBinaryFlat:
    p50/p95 latency, queries/s, recall@10 against exact float search, bytes per experience.

    \b
    Examples:
      dso bench retrieval --quick
      dso bench retrieval --sizes 10000,100000,1000000
      dso bench retrieval --sizes 1000000 --add      # the 1M rows beside an earlier 10k/100k run
    """
    import faiss

    faiss.omp_set_num_threads(threads)
    n_sizes = [10_000] if quick else [int(s) for s in sizes.split(",")]
    texts, real = _real_vectors()
    order = np.random.default_rng(0).permutation(len(real))
    held, kept = order[:N_QUERIES], np.sort(order[N_QUERIES:])
    corpus = Corpus(real[kept])
    lift = _lift_map(real.shape[1])
    click.echo(f"real vectors: all-MiniLM-L6-v2 (384-d) of {len(kept):,} corpus texts, lifted to {DIM} dims by a seeded "
               f"random orthogonal map; rows past {len(kept):,} are synthetic Gaussian draws with the real vectors' "
               f"mean and covariance, lifted the same way. {N_QUERIES} held-out corpus texts are the queries.")
    rows = []
    for n in n_sizes:
        click.echo(f"n = {n:,}, lifted MiniLM ...")
        rows += [{**r, "space": "lifted"} for r in bench_size(n, corpus, real[held], lift)]
        click.echo(f"n = {n:,}, default space (MiniLM + the shipped Zen head) ...")
        rows += zen_size(n, corpus, real[held])
        click.echo(format_table([r for r in rows if r["n"] == n], ["space", "index", "p50_ms", "recall_at_10"]))
    disk = disk_per_experience(corpus, [texts[i] for i in kept], lift, 2000 if quick else 10_000)
    for r in rows:
        if r["index"] == "dsonet" and r["space"] == "lifted":
            r["disk_bytes_per_experience"] = round(disk, 1)
    click.echo(format_table(rows, ["space", "index", "n", "p50_ms", "p95_ms", "qps", "recall_at_10", "bytes_per_experience"]))
    click.echo(f"dsonet library file: {disk:,.0f} bytes per experience on disk (SQLite, text included). "
               f"Targets: p50 ≤ 20 ms at 100k, ≤ 150 ms at 1M; recall@10 ≥ 0.95; ≤ 1.2 KB per experience.")
    load = os.getloadavg()[0]
    click.echo(f"1-minute load average {load:.1f} on {os.cpu_count()} cores: latencies are wall-clock and include "
               "waiting for a shared CPU.")
    for r in rows:
        r["load_average"] = round(load, 1)
    if add_sizes and not quick:
        earlier = json.loads((RESULTS_DIR / "retrieval.json").read_text())["rows"]
        rows = [r for r in earlier if r["n"] not in n_sizes] + rows  # each row keeps the load it was measured under
    path = write_results("retrieval", {"rows": rows, "targets": TARGETS, "threads": threads, "load_average": load,
                                       "vectors": "MiniLM-384 of corpus_texts lifted to 7680 (seeded orthogonal map) "
                                                  "+ synthetic draws matching mean/covariance past the corpus; space zen: "
                                                  "the same 384-dim rows through the shipped Zen head, codes against "
                                                  "the profile's fixed baseline"},
                         quick=quick)
    click.echo(f"wrote {path}")
