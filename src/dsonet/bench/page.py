"""`dso bench page`: how long the node's page takes to answer on a large library (target: 200 ms a page).

A real node's data: a library file of ``--rows`` rows at the default profile's d = 7680 (GSM8K
texts, 20 signers, 6 domains; codes only, as peers' rows are; built once and kept under
$DSONET_CACHE), a journal filled to its bounds (`dsonet.network.journal`: its rounds, and every
peer's reputation points), opened by a `Node` and served by its FastAPI app (`create_app`, the
token's cookie included). Each case is one ``GET /`` through the app, the whole page rendered:
the library's page of rows, the peers' plots and table, the rounds. Median and slowest of
``--runs`` requests per case, after a warm-up request.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import click
import httpx
import numpy as np

from dsonet.aggregate import RoundResult
from dsonet.bench.report import format_table, write_results
from dsonet.codec import default_profile, make_batch
from dsonet.data import corpus_texts
from dsonet.encoders.cache import cache_dir
from dsonet.experience import MAX_TEXT_CHARS, MAX_WORDS, Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.network.journal import POINTS, ROUNDS, Journal
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub
from dsonet.network.web.rows import read_page

PEERS, DOMAINS = 20, ("math", "math.geometry", "code.python", "code.sql", "general", "rare.topic")
TARGET_MS = 200.0
TOKEN = "bench-token"


def library_dir(rows: int) -> Path:
    """A node's data folder holding a library of ``rows`` peers' rows, built once and reused."""
    path = cache_dir() / "page" / f"node-{rows}"
    if (path / "library.sqlite").exists():
        return path

    click.echo(f"building a {rows:,}-row library at {path} (once)")
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    texts = list(dict.fromkeys(" ".join(t.split()[:MAX_WORDS])[:MAX_TEXT_CHARS] for t in corpus_texts(10_000)))
    signers = [NodeIdentity.from_seed(f"page-bench-{i}".encode()) for i in range(PEERS)]
    profile = default_profile(7680, "none")
    rng = np.random.default_rng(0)
    lib = Library(partial / "library.sqlite", profile=profile, defer_merge=True)
    last = {}  # each signer's last batch, for the journal's rounds
    try:
        for start in range(0, rows, 100):  # a batch of 100 rows from one signer, as a peer publishes
            n = min(100, rows - start)
            who = signers[(start // 100 + start // len(texts)) % PEERS]  # each pass over the texts shifts the signers
            domain = DOMAINS[-1] if (start // 100) % 100 == 0 else DOMAINS[(start // 100) % (len(DOMAINS) - 1)]
            # the texts in turn: a text comes back on the next pass, signed by another peer (a copy)
            exps = [Experience(texts[(start + i) % len(texts)], domain, 0.5, Provenance(who.node_id))
                    for i in range(n)]
            v = rng.standard_normal((n, profile.dim)).astype(np.float32)
            last[who.node_id] = make_batch(exps, v / np.linalg.norm(v, axis=1, keepdims=True), profile, who)
            lib.ingest(last[who.node_id])
    finally:
        lib.close()
    _fill_journal(partial / "journal.sqlite", list(last.values()))
    partial.rename(path)
    return path


def _fill_journal(path: Path, batches: list) -> None:
    """The journal at its bounds: every round kept (a batch of each signer's in turn, 10% of its rows
    refused), every peer's points kept."""
    journal = Journal(path)
    rng = np.random.default_rng(1)
    now = int(time.time() * 1000)
    for r in range(ROUNDS):
        batch = batches[r % len(batches)]
        keep = rng.random(len(batch)) < 0.9
        rejected = [(batch.node_id, batch.experiences[i].id, "filter: median") for i in np.flatnonzero(~keep)]
        journal.round(RoundResult([batch], [keep], rejected, {"rows": len(batch)}), now - (ROUNDS - r) * 60_000,
                      lambda _: float(rng.uniform(0.2, 0.9)))
    peers = sorted({b.node_id for b in batches})
    for r in range(POINTS):
        journal.outcome(peers, bool(r % 3), lambda _: float(rng.uniform(0.2, 0.9)), now - (POINTS - r) * 1000)
    journal.close()


async def _measure(data: Path, runs: int) -> list[dict]:
    from dsonet.network.api import create_app

    node = await Node.open(NodeConfig(data, encoder=None, dim=7680, batch_interval_s=3600), InProcessHub().transport())
    app = create_app(node, token=TOKEN, manage_node=False)
    rows: list[dict] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node") as client:
        await client.get("/", params={"token": TOKEN})  # the cookie, as a browser gets it
        first = await asyncio.to_thread(read_page, node.library.path)
        deep = await asyncio.to_thread(read_page, node.library.path, before=first.rows[0].seq - int(first.total * 0.9))
        signer = first.rows[0].signer
        cases = {"first page": {}, "page at 90% depth": {"before": deep.rows[0].seq + 1},
                 "page back (after=)": {"after": deep.rows[0].seq}, "domain, common": {"domain": "math"},
                 "domain, 1% of rows": {"domain": DOMAINS[-1]}, "text, common word": {"text": "the"},
                 "text, matching no row": {"text": "zzqx no such words"}, "signer prefix": {"signer": signer[:8]}}
        for name, params in cases.items():
            times, size, shown = [], 0, 0
            for i in range(runs + 1):
                t = time.perf_counter()
                r = await client.get("/", params=params)
                if i:  # the first is a warm-up
                    times.append(time.perf_counter() - t)
                if r.status_code != 200:
                    raise click.ClickException(f"{name}: GET / answered {r.status_code}: {r.text[:300]}")
                size, shown = len(r.content), r.text.count('class="lesson"')
            ms = np.array(times) * 1000
            rows.append({"case": name, "params": params, "median_ms": round(float(np.median(ms)), 1),
                         "max_ms": round(float(ms.max()), 1), "rows_shown": shown, "page_kb": round(size / 1024, 1),
                         "within_target": bool(np.median(ms) <= TARGET_MS)})
    await node.close()
    return rows


@click.command()
@click.option("--rows", default=100_000, show_default=True, help="Rows in the library paged through.")
@click.option("--runs", default=15, show_default=True, help="Requests per case (median reported).")
@click.option("--quick", is_flag=True, help="10,000 rows, 5 runs: a smoke run (writes page-quick.json).")
def cli(rows: int, runs: int, quick: bool) -> None:
    """The node's page on a --rows library: GET / through the node's app, per case (first page, a
    deep page by cursor, the page back, domain, text and signer filters), median and slowest in ms,
    against the 200 ms target. Writes bench/results/page.json.

    \b
    Examples:
      dso bench page
      dso bench page --quick
    """
    if quick:
        rows, runs = 10_000, 5
    built = library_dir(rows)
    with tempfile.TemporaryDirectory() as tmp:  # a copy: the node's open writes its fit into the file
        data = Path(tmp) / "node"
        shutil.copytree(built, data)
        t, load = time.perf_counter(), os.getloadavg()[0]
        results = asyncio.run(_measure(data, runs))
        wall, load = time.perf_counter() - t, (load + os.getloadavg()[0]) / 2  # the machine is shared: say how busy
    click.echo(format_table(results, ["case", "median_ms", "max_ms", "rows_shown", "page_kb", "within_target"]))
    path = write_results("page", {"rows": rows, "runs": runs, "target_ms": TARGET_MS, "cases": results,
                                  "wall_s": round(wall, 1), "load_1min": round(load, 1)}, quick=quick)
    click.echo(f"wrote {path}")
