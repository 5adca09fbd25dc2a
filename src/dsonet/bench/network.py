"""`dso bench network`: three node processes on a three-server NATS cluster, driven over HTTP.

Measured (all real: nats-server, SQLite, MiniLM in every node):
  submit_per_s          POST /experiences with text (the node encodes), 4 concurrent clients, at A
  submit_vector_per_s   the same with the vector sent along (no encoding: API + SQLite cost)
  search_per_s          POST /search with a text query, 4 concurrent clients, at B
  propagation p50/p95   submit at A -> GET at C answers 200 (in C's library, so searchable),
                        batch interval 1 s: the interval dominates, by design of the paper's schedule
  wire bytes/experience A's published payload bytes / experiences (msgpack CompressedBatch)
  by batch size         the default profile's batches of 1, 10 and 100 fixed texts: payload bytes
                        per experience (text, code, signature and framing included), and apart from
                        them the NATS headers each message carries (message id and sender hint)

Beside the paper's wire figures (29 KB per round of 100 experiences at d = 768; 964 B per
7680-dim vector) we build batches of 100 of the same texts at d = 768 and 7680 (MiniLM lifted
isometrically, as in `dso bench codec`) and the alternative a user would reach for: the same
experiences as JSON with float32 vectors.
"""

from __future__ import annotations

import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import httpx
import numpy as np

from dsonet.bench.codec import lift
from dsonet.bench.report import format_table, write_results
from dsonet.codec import default_profile, make_batch, profile_of
from dsonet.data import gsm8k
from dsonet.encoders import default_encoder, minilm
from dsonet.encoders.cache import cached_encode
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.network import cluster
from dsonet.network.cluster_spec import ClusterError, make_spec
from dsonet.network.procs import NodeProcess
from dsonet.network.transport import MSG_ID, SENDER

PAPER = {"bytes_per_round_100_at_768": 29 * 1024, "bytes_per_experience_7680": 964}
NODE_ARGS = ["--batch-interval", "1", "--soup", "rate_limit=1000000", "--log-level", "WARNING"]


def _texts(n: int, offset: int = 0) -> list[str]:
    items = gsm8k()
    return [f"When a problem reads like '{' '.join(it.question.split()[:12])}', write its equation first."
            for it in items[offset:offset + n]]


def _rate(fn, items: list, workers: int = 4) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fn, items))
    return len(items) / (time.perf_counter() - t)


def _propagation(a, c, texts: list[str], timeout_s: float = 30.0) -> list[float]:
    a_url, c_url = a.url, c.url
    out = []
    with httpx.Client(timeout=60) as http:
        for text in texts:
            t0 = time.perf_counter()
            r = http.post(f"{a_url}/experiences", json={"text": text, "domain": "bench.propagation"})
            r.raise_for_status()
            exp_id = r.json()["id"]
            while http.get(f"{c_url}/experiences/{exp_id}").status_code != 200:
                if time.perf_counter() - t0 > timeout_s:
                    raise click.ClickException(
                        f"{exp_id[:12]} did not reach C within {timeout_s:.0f} s; A published "
                        f"{_metric(a_url, 'dso_published_experiences_total'):.0f}, C received "
                        f"{_metric(c_url, 'dso_received_messages_total'):.0f}; C's log ends:\n{c.log_tail()}")
                time.sleep(0.01)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def wire_sizes(texts: list[str], vectors: np.ndarray) -> list[dict]:
    """Bytes per experience on the wire: our batches of 100 at d = 384, 768, 7680 vs float32 JSON."""
    ident = NodeIdentity.from_seed(b"bench")
    exps = [Experience(t, "math", 0.8, Provenance(ident.node_id, "bench", 0, 0)) for t in texts]
    rows = []
    for dim in (vectors.shape[1], 768, 7680):
        v = lift(vectors, dim)
        ours = len(make_batch(exps, v, default_profile(dim, "bench"), ident).to_msgpack())
        plain = len(json.dumps([{**e.to_dict(), "vector": row.tolist()} for e, row in zip(exps, v)]).encode())
        paper = PAPER["bytes_per_round_100_at_768"] / 100 if dim == 768 else (
            PAPER["bytes_per_experience_7680"] if dim == 7680 else None)
        rows.append({"dim": dim, "ours_bytes_per_exp": ours / len(exps), "json_float32_bytes_per_exp": plain / len(exps),
                     "paper_bytes_per_exp": paper, "ratio_vs_json": plain / ours})
    return rows


BATCH_SIZES = (1, 10, 100)


def wire_by_batch(texts: list[str], vectors: np.ndarray, profile) -> dict:
    """Bytes per experience in the default profile at each batch size, over the same 100 texts."""
    ident = NodeIdentity.from_seed(b"bench")
    exps = [Experience(t, "math", 0.8, Provenance(ident.node_id, "qwen2.5-coder-0.5b-instruct", 0, 1)) for t in texts]
    out, headers = {}, {}
    for n in BATCH_SIZES:
        batches = [make_batch(exps[i:i + n], vectors[i:i + n], profile, ident) for i in range(0, len(exps), n)]
        out[str(n)] = sum(len(b.to_msgpack()) for b in batches) / len(exps)
        # what JetStream adds to each message: "NATS/1.0\r\n" + one "Key: value\r\n" a header + "\r\n"
        per_message = [len("NATS/1.0\r\n\r\n") + len(f"{MSG_ID}: {b.hash}\r\n{SENDER}: {ident.node_id}\r\n")
                       for b in batches]
        headers[str(n)] = sum(per_message) / len(exps)
    return {"wire_bytes_per_experience_by_batch": out, "nats_header_bytes_per_experience_by_batch": headers,
            "mean_text_bytes": float(np.mean([len(t.encode()) for t in texts])), "texts": len(texts)}


def run(quick: bool) -> dict:
    n_submit, n_search, n_prop = (40, 60, 8) if quick else (100, 100, 30)
    with tempfile.TemporaryDirectory(prefix="dso-bench-net-") as tmp:
        root = Path(tmp)
        spec = make_spec(root / "cluster", n=3, client_port=None, cluster_port=None, http_port=None)
        nodes: list[NodeProcess] = []
        try:
            cluster.up(spec)
            nodes = [NodeProcess(root / n, spec.urls, args=NODE_ARGS).start() for n in "abc"]
            submit_texts = _texts(n_submit)
            vec_texts = _texts(n_submit, 400)
            vec_rows = cached_encode(default_encoder(), vec_texts)  # the nodes' profile space; loads while they load
            for node in nodes:
                node.wait_ready(300)
            a, b, c = nodes
            with httpx.Client(base_url=a.url, timeout=60) as http:
                http.post("/experiences", json={"text": "When warming up, send one request first."})
                submit_per_s = _rate(lambda t: http.post("/experiences", json={"text": t}).raise_for_status(),
                                     submit_texts)
                submit_vector_per_s = _rate(
                    lambda i: http.post("/experiences", json={"text": vec_texts[i], "vector": vec_rows[i].tolist()})
                    .raise_for_status(), list(range(len(vec_texts))))
            with httpx.Client(base_url=b.url, timeout=60) as http:
                queries = [t.replace("write its equation first", "what should I do") for t in _texts(n_search, 800)]
                search_per_s = _rate(lambda q: http.post("/search", json={"query": q}).raise_for_status(), queries)
            prop = _propagation(a, c, _texts(n_prop, 1200))
            wire = _metric(a.url, "dso_published_bytes_total") / max(_metric(a.url, "dso_published_experiences_total"), 1)
        finally:
            for node in nodes:
                node.stop(20)
            for server in spec.servers:
                cluster.stop_server(spec, server, timeout_s=5)
    native = cached_encode(minilm(), vec_texts)  # the 384-dim vectors the wire table lifts to 768 and 7680
    sizes = wire_sizes(vec_texts[:100] if len(vec_texts) >= 100 else _pad(vec_texts), _pad_rows(native))
    fixed = _texts(100, 400)  # the same 100 texts in every run, quick or not
    by_batch = wire_by_batch(fixed, cached_encode(default_encoder(), fixed), profile_of(default_encoder()))
    return {**by_batch,
        "submit_per_s": submit_per_s, "submit_vector_per_s": submit_vector_per_s, "search_per_s": search_per_s,
        "propagation_p50_ms": float(np.percentile(prop, 50)), "propagation_p95_ms": float(np.percentile(prop, 95)),
        "propagation_samples": len(prop), "batch_interval_s": 1.0,
        "wire_bytes_per_experience": wire, "wire_by_dim": sizes, "paper": PAPER, "quick": quick,
        "profile_dim": default_encoder().dim,
    }


def _pad(texts: list[str]) -> list[str]:
    """Exactly 100 distinct texts (a round of 100, as the paper counts), repeating with a suffix if short."""
    return [texts[i % len(texts)] + ("" if i < len(texts) else f" Case {i}.") for i in range(100)]


def _pad_rows(rows: np.ndarray) -> np.ndarray:
    return rows[np.arange(100) % len(rows)]


@click.command()
@click.option("--quick", is_flag=True, help="Fewer requests (about a minute, mostly model loading).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("bench/results"),
              show_default=True)
def cli(quick: bool, out: Path) -> None:
    """Three nodes on a three-server NATS cluster: API throughput, propagation, bytes on the wire.

    \b
    Example:
      dso bench network --quick
    """
    try:
        cluster.nats_server_binary()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    res = run(quick)
    click.echo(format_table([
        {"measure": "submissions/s (text, node encodes)", "ours": res["submit_per_s"]},
        {"measure": "submissions/s (text + vector)", "ours": res["submit_vector_per_s"]},
        {"measure": "searches/s (text query)", "ours": res["search_per_s"]},
        {"measure": "propagation A->C p50 ms (interval 1 s)", "ours": res["propagation_p50_ms"]},
        {"measure": "propagation A->C p95 ms (interval 1 s)", "ours": res["propagation_p95_ms"]},
        {"measure": "wire bytes/experience (default profile d=7680, live batches of a few)", "ours": res["wire_bytes_per_experience"]},
    ], ["measure", "ours"]))
    click.echo()
    click.echo(format_table([{"batch_size": int(n), "bytes_per_experience": b,
                              "nats_headers_per_experience": res["nats_header_bytes_per_experience_by_batch"][n],
                              "target": 1400 if n == "1" else 1300, "paper (vector alone)": 964}
                             for n, b in res["wire_bytes_per_experience_by_batch"].items()],
                            ["batch_size", "bytes_per_experience", "target", "paper (vector alone)",
                             "nats_headers_per_experience"]))
    click.echo(f"(default profile, {res['texts']} fixed texts of {res['mean_text_bytes']:.0f} bytes on average)")
    click.echo()
    click.echo(format_table(res["wire_by_dim"], ["dim", "ours_bytes_per_exp", "paper_bytes_per_exp",
                                                 "json_float32_bytes_per_exp", "ratio_vs_json"]))
    path = write_results("network", res, out, quick=quick)
    click.echo(f"\nwrote {path}")
