"""`dso bench codec`: BitDelta's size, fidelity and speed on real text embeddings.

Vectors, three spaces over the same texts (GSM8K questions, solutions and their sentences):
  minilm         all-MiniLM-L6-v2, 384 dims, as it comes;
  minilm-lifted  the same vectors lifted to 768 and 7680 dims by a fixed random orthogonal map
                 (a lift preserves every inner product: it shows what the code size does);
  zen            the default profile's space, MiniLM + the Zen head, 7680 dims.

Fidelity, per method and (dim, group size):
  cosine     cos(e, ê) per vector (mean and minimum)
  rel_l2     ‖e − ê‖ / ‖e‖, mean over vectors
  rmse       sqrt(mean over coordinates of (e − ê)²), i.e. per-coordinate RMSE
  recall@10  |top10(q, Ê) ∩ top10(q, E)| / 10 averaged over queries (GSM8K questions;
             corpus = every other text), exact inner-product search on both sides.
Compared methods: sentence-transformers' binary (sign bits, no scale) and int8 (per-dim
calibrated ranges) quantisation, and float32. Their reconstructions: binary → ±1/√d, int8 →
the calibrated dequantisation.

At scale (`scale_rows`, 10k / 100k / 1M rows: the real corpus first, then synthetic MiniLM-like
draws as in `dso bench retrieval`), the default profile (rotated, g = d) in the lifted space and
in the default space (through the shipped Zen head), with two baselines: the profile's fixed ē
(protocol v2: shipped with the encoder, named by hash, never sent) and the per-batch mean of
1,000 rows (protocol v1). Per row: cos(e, ê), cos(Δ, Δ̂) with Δ = e − ē (a large common ē
inflates cos(e, ê), and Δ is what the bits carry), relative L2. Beside them faiss IndexRaBitQ's
own reconstruction (968 bytes, against the centroid it trains).
"""

from __future__ import annotations

import time

import click
import numpy as np

from dsonet.bench.report import format_table, median_seconds, write_results
from dsonet.bench.retrieval import Corpus, _lift_map, _real_vectors
from dsonet.codec import bytes_per_vector, compress, decompress
from dsonet.codec.batch import DEFAULT_ROTATION_SEED, default_profile
from dsonet.data import corpus_texts, gsm8k
from dsonet.encoders import default_encoder, minilm
from dsonet.encoders.cache import cached_encode

PAPER = {
    "bytes_7680": 964,
    "ratio_7680": 31.87,
    "rmse_avg_percent": 0.51,  # seeds/003, "Avg RMSE", undefined by the paper
    "cosine_768": {64: 0.934, 128: 0.957, 256: 0.971},  # federated paper §9
    "compress_ms_per_vector": 3.2,  # A100
}


def lift(x: np.ndarray, dim: int, seed: int = 1234) -> np.ndarray:
    """Embed (n, k) vectors isometrically into `dim` dims with a fixed random orthonormal map."""
    if dim == x.shape[1]:
        return x
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, x.shape[1])))
    return (x @ q.T.astype(np.float32)).astype(np.float32)


def _topk(q: np.ndarray, corpus: np.ndarray, k: int = 10) -> np.ndarray:
    scores = q @ corpus.T
    return np.argpartition(-scores, k, axis=1)[:, :k]


def recall_at_10(queries: np.ndarray, corpus: np.ndarray, approx: np.ndarray, truth: np.ndarray | None = None) -> float:
    truth = _topk(queries, corpus) if truth is None else truth
    got = _topk(queries, approx)
    hits = (got[:, :, None] == truth[:, None, :]).any(-1).sum(1)
    return float(hits.mean() / 10)


def _cosines(e: np.ndarray, rec: np.ndarray) -> np.ndarray:
    return (e * rec).sum(1) / np.maximum(np.linalg.norm(e, axis=1) * np.linalg.norm(rec, axis=1), 1e-12)


def fidelity(e: np.ndarray, rec: np.ndarray) -> dict:
    cos = _cosines(e, rec)
    err = e - rec
    return {
        "cosine_mean": float(cos.mean()),
        "cosine_min": float(cos.min()),
        "rel_l2": float((np.linalg.norm(err, axis=1) / np.linalg.norm(e, axis=1)).mean()),
        "rmse": float(np.sqrt((err**2).mean())),
    }


def _baselines(corpus: np.ndarray) -> list[tuple[str, np.ndarray, int]]:
    """(method, reconstruction, bytes per vector) for sentence-transformers' binary and int8, and float32."""
    from sentence_transformers.quantization import quantize_embeddings

    d = corpus.shape[1]
    packed = quantize_embeddings(corpus, precision="binary")  # (n, d/8) int8: bits of e > 0
    bits = np.unpackbits(packed.view(np.uint8), axis=1)[:, :d].astype(np.float32)
    binary = (bits * 2 - 1) / np.sqrt(d)
    q8 = quantize_embeddings(corpus, precision="int8")
    starts, steps = corpus.min(0), (corpus.max(0) - corpus.min(0)) / 255  # the ranges it calibrated on
    int8 = starts + (q8.astype(np.float32) + 128) * steps
    return [("binary", binary, packed.shape[1]), ("int8", int8.astype(np.float32), d), ("float32", corpus, 4 * d)]


def fidelity_rows(queries: np.ndarray, corpus: np.ndarray, dims: list[int], groups: list[int], space: str) -> list[dict]:
    rows = []
    for dim in dims:
        qd, cd = lift(queries, dim), lift(corpus, dim)
        truth = _topk(qd, cd)
        for g in sorted({*groups, dim}):
            if dim % g:
                continue
            cosines = {}
            for method, seed in (("bitdelta", None), ("bitdelta-rotated", DEFAULT_ROTATION_SEED)):
                rec = decompress(compress(cd, g, rotation_seed=seed))
                size = bytes_per_vector(dim, g)
                cosines[method] = _cosines(cd, rec)
                rows.append({"space": space, "method": method, "dim": dim, "group_size": g, "bytes_per_vector": size,
                             "ratio": 4 * dim / size, **fidelity(cd, rec), "recall_at_10": recall_at_10(qd, cd, rec, truth)})
            # paired over the same vectors: is rotation's change of cosine more than noise?
            gain = cosines["bitdelta-rotated"] - cosines["bitdelta"]
            rows[-1] |= {"cosine_gain_vs_plain": float(gain.mean()),
                         "cosine_gain_se": float(gain.std(ddof=1) / np.sqrt(len(gain)))}
        for method, rec, size in _baselines(cd):
            rows.append({"space": space, "method": method, "dim": dim, "group_size": None, "bytes_per_vector": size,
                         "ratio": 4 * dim / size, **fidelity(cd, rec), "recall_at_10": recall_at_10(qd, cd, rec, truth)})
    return rows


def throughput_rows(vectors: np.ndarray, repeats: int) -> tuple[list[dict], float]:
    n, dim = vectors.shape
    rows = []
    for method, seed in (("bitdelta", None), ("bitdelta-rotated", DEFAULT_ROTATION_SEED)):
        codes = compress(vectors, dim, rotation_seed=seed)
        t_c = median_seconds(lambda: compress(vectors, dim, rotation_seed=seed), repeats)
        t_d = median_seconds(lambda: decompress(codes), repeats)
        rows.append({"method": method, "dim": dim, "compress_vectors_per_s": n / t_c, "decompress_vectors_per_s": n / t_d})
    memcpy = n / median_seconds(lambda: vectors.copy(), repeats)
    return rows, memcpy


def rotation_verdict(rows: list[dict]) -> dict:
    """Where rotated BitDelta is less faithful than plain: mean cosine lower by more than two
    paired standard errors (a random lift already rotates, so there the two tie within noise)."""
    cells = [r for r in rows if "cosine_gain_vs_plain" in r]
    worse = [{k: r[k] for k in ("space", "dim", "group_size", "cosine_gain_vs_plain", "cosine_gain_se")}
             for r in cells if r["cosine_gain_vs_plain"] < -2 * r["cosine_gain_se"]]
    gains = [r["cosine_gain_vs_plain"] for r in cells]
    return {"cells": len(cells), "worse": worse, "largest_loss": min(gains), "largest_gain": max(gains)}


def choose_default(rows: list[dict]) -> dict:
    """Protocol default (g = d): rotate if rotated BitDelta is at least as faithful in every real
    (unlifted) space we measured — the native MiniLM space and the default profile's Zen space."""
    gains = {}
    for r in rows:
        if r["method"] == "bitdelta" and r["group_size"] == r["dim"] and r["space"] != "minilm-lifted":
            rot = next(x for x in rows if x["space"] == r["space"] and x["dim"] == r["dim"]
                       and x["group_size"] == r["group_size"] and x["method"] == "bitdelta-rotated")
            gains[r["space"]] = rot["cosine_mean"] - r["cosine_mean"]
    return {"rotate": all(v >= 0 for v in gains.values()), "cosine_gain_at_g_eq_d": gains}


def _scale_fidelity(e: np.ndarray, rec: np.ndarray, base: np.ndarray) -> dict[str, np.ndarray]:
    delta, delta_hat = e - base, rec - base
    return {"cosine": _cosines(e, rec), "delta_cosine": _cosines(delta, delta_hat),
            "rel_l2": np.linalg.norm(e - rec, axis=1) / np.linalg.norm(e, axis=1)}


def scale_rows(sizes: list[int], batch: int = 1000) -> list[dict]:
    """Fidelity of the default profile's codes over n rows, in the lifted and the default space,
    with the fixed baseline and with the per-batch mean; faiss RaBitQ's reconstruction beside them."""
    import faiss

    _, real = _real_vectors()
    corpus, lift_map, encoder = Corpus(real), _lift_map(real.shape[1]), default_encoder()
    spaces = {"minilm-lifted": lambda x: x @ lift_map, "zen": encoder.head.project}
    rows = []
    for space, embed in spaces.items():
        first = embed(corpus.chunk(0, min(max(sizes), 10_000)))
        fixed = encoder.baseline if space == "zen" else first.mean(0)  # the lifted space ships none: its corpus mean
        rabitq = faiss.IndexRaBitQ(first.shape[1], faiss.METRIC_INNER_PRODUCT)
        rabitq.train(first)
        for n in sizes:
            parts: dict[str, list[dict]] = {"fixed": [], "batch-mean": [], "faiss-rabitq": []}
            for start in range(0, n, batch):
                e = embed(corpus.chunk(start, min(n, start + batch)))
                for name, base in (("fixed", fixed), ("batch-mean", None)):
                    codes = compress(e, e.shape[1], baseline=base, rotation_seed=DEFAULT_ROTATION_SEED)
                    parts[name].append(_scale_fidelity(e, decompress(codes), codes.baseline))
                rec = rabitq.sa_decode(rabitq.sa_encode(e))
                parts["faiss-rabitq"].append(_scale_fidelity(e, rec, faiss.vector_to_array(rabitq.center)))
            for name, chunks in parts.items():
                metric = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
                size = bytes_per_vector(e.shape[1], e.shape[1]) if name != "faiss-rabitq" else rabitq.code_size
                rows.append({"space": space, "n": n, "method": "bitdelta-rotated" if name != "faiss-rabitq" else name,
                             "baseline": name if name != "faiss-rabitq" else "centroid", "bytes_per_vector": size,
                             "cosine_mean": float(metric["cosine"].mean()), "cosine_min": float(metric["cosine"].min()),
                             "delta_cosine_mean": float(metric["delta_cosine"].mean()),
                             "rel_l2": float(metric["rel_l2"].mean())})
    return rows


def run(quick: bool = False, repeats: int = 5, sizes: tuple[int, ...] = (10_000, 100_000)) -> dict:
    texts = corpus_texts(10_000)
    if quick:
        texts = texts[:2_500]  # the first ~270 GSM8K items: questions, solutions and their sentences
    vectors = cached_encode(minilm(), texts, "document")
    questions = {item.question for item in gsm8k()}
    is_query = np.array([t in questions for t in texts])
    queries, corpus = vectors[is_query], vectors[~is_query]
    dims, groups = ([384, 7680], [128]) if quick else ([384, 768, 7680], [32, 64, 128, 256])
    click.echo(f"{len(vectors)} real texts encoded by all-MiniLM-L6-v2 (384 dims); {len(queries)} queries, "
               f"{len(corpus)} corpus vectors. Space 'minilm-lifted' is the same vectors lifted by a fixed random "
               "orthogonal map; space 'zen' is the default profile's encoder (MiniLM + Zen head, 7680 dims).")
    t0 = time.perf_counter()
    rows = fidelity_rows(queries, corpus, [384], groups, "minilm")
    rows += fidelity_rows(queries, corpus, [d for d in dims if d != 384], groups, "minilm-lifted")
    zen = default_encoder()
    zen_vectors = cached_encode(zen, texts, "document")  # the head over the cached MiniLM vectors: cheap
    rows += fidelity_rows(zen_vectors[is_query], zen_vectors[~is_query], [zen.dim], groups, "zen")
    click.echo(format_table(rows, ["space", "method", "dim", "group_size", "bytes_per_vector", "ratio", "cosine_mean",
                                   "cosine_min", "rel_l2", "rmse", "recall_at_10"]))
    batch = lift(np.resize(corpus, (2_000 if quick else 10_000, corpus.shape[1])), 7680)
    tput, memcpy = throughput_rows(batch, 2 if quick else repeats)
    click.echo(f"\nThroughput at d = 7680, g = 7680, batches of {len(batch):,} (median of runs):")
    click.echo(format_table(tput, ["method", "dim", "compress_vectors_per_s", "decompress_vectors_per_s"]))
    click.echo(f"numpy copy of the same floats (memory-bandwidth floor): {memcpy:,.0f} vectors/s")
    scale = scale_rows([2_000] if quick else list(sizes))
    click.echo("\nThe default profile at scale (rotated, g = d): fixed baseline (v2) vs per-batch mean (v1), beside RaBitQ:")
    click.echo(format_table(scale, ["space", "n", "method", "baseline", "bytes_per_vector", "cosine_mean", "cosine_min",
                                    "delta_cosine_mean", "rel_l2"]))
    default = choose_default(rows)
    click.echo("\nRotation's change of mean cosine at g = d: "
               + ", ".join(f"{space}: {v:+.4f}" for space, v in default["cosine_gain_at_g_eq_d"].items())
               + f" -> protocol default: {'rotated' if default['rotate'] else 'plain'} BitDelta "
               f"(dsonet.codec.default_profile is {'rotated' if default_profile(8, 'x').rotation_seed is not None else 'plain'}).")
    verdict = rotation_verdict(rows)
    click.echo(f"Rotated vs plain at every (space, d, g): rotated is worse beyond 2 standard errors in "
               f"{len(verdict['worse'])} of {verdict['cells']} cells; largest loss {verdict['largest_loss']:+.5f}, "
               f"largest gain {verdict['largest_gain']:+.4f}.")
    paper = ", ".join(f"g={g}: {c}" for g, c in PAPER["cosine_768"].items())
    click.echo(f"Paper: 964 B and 31.87x at d = 7680; 'RMSE 0.51%'; cosine at d = 768 {paper}; 3.2 ms per vector.")
    result = {"rows": rows, "scale": scale, "throughput": tput, "memcpy_vectors_per_s": memcpy, "default": default, "rotation": verdict,
              "paper": PAPER, "quick": quick, "n_queries": int(len(queries)), "n_corpus": int(len(corpus)),
              "seconds": time.perf_counter() - t0}
    path = write_results("codec", result, quick=quick)
    click.echo(f"wrote {path}")
    return result


@click.command()
@click.option("--quick", is_flag=True, help="2,500 texts, dims 384 and 7680, g = 128 and d only (about a minute).")
@click.option("--repeats", default=5, show_default=True, help="Timing repeats; the median is reported.")
@click.option("--sizes", default="10000,100000", show_default=True,
              help="Rows for the fidelity-at-scale table (real corpus, then synthetic); add 1000000 for the 1M run.")
def cli(quick: bool, repeats: int, sizes: str) -> None:
    """BitDelta, rotated BitDelta, binary, int8 and float32 on real MiniLM embeddings.

    Prints size, cosine, relative L2, RMSE and recall@10 per (method, dim, group size),
    and compress/decompress throughput at d = 7680; writes bench/results/codec.json
    (codec-quick.json with --quick).

    \b
    Examples:
      dso bench codec --quick
      dso bench codec --sizes 10000,100000,1000000
    """
    run(quick=quick, repeats=repeats, sizes=tuple(int(n) for n in sizes.split(",")))
