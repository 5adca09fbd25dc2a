"""`dso bench coldstart`: what one `dso search` costs from a cold process, and what the core install weighs.

Measured in one run, so the machine's load colours every row alike:

- cold `dso search` on a library of ``--rows`` rows (built once, kept under $DSONET_CACHE):
  the real CLI in a fresh process, median of ``--runs``, runs of the set-ups interleaved. Set-ups:
  the encoder's path (numpy, the default; or torch, ``DSONET_ENCODER_BACKEND=torch``) × the
  index's fit and the merged view's clusters kept in the file or not (both tables dropped before
  each run: every open was so before);
- import time (``python -X importtime``, the top-level modules' cumulative time) of the CLI, and
  of the search path with each encoder;
- opening the library in-process, with and without the kept fit;
- encoding: texts per second in batches and one query's latency, numpy beside torch, and the
  smallest cosine between their vectors;
- the core install (``pip install .`` into a fresh venv, no extras): site-packages size, package
  count, that ``import torch`` fails there, and a cold `dso search` from it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from dsonet.bench.report import format_table, median_seconds, write_results
from dsonet.data import corpus_texts
from dsonet.encoders import default_encoder
from dsonet.encoders.cache import cache_dir, cached_encode
from dsonet.encoders.default import zen_minilm, zen_minilm_numpy
from dsonet.experience import MAX_TEXT_CHARS, MAX_WORDS, Experience
from dsonet.library import Library

QUERY = "A train travels 120 km in 2 hours; how fast does it go?"
ROOT = Path(__file__).resolve().parents[3]  # the source tree (pyproject.toml), for the core install


def library_file(rows: int) -> Path:
    """A library of ``rows`` GSM8K texts (questions, solutions, sentences; longer ones cut to an
    experience's 32 words) encoded by the default encoder, built once and reused."""
    path = cache_dir() / "coldstart" / f"library-{rows}.sqlite"
    if path.exists():
        return path

    texts = list(dict.fromkeys(" ".join(t.split()[:MAX_WORDS])[:MAX_TEXT_CHARS] for t in corpus_texts(rows)))[:rows]
    if len(texts) < rows:
        raise click.ClickException(f"--rows: the packaged corpus gives {len(texts)} distinct texts, fewer than {rows}")
    click.echo(f"building a {rows}-row library at {path} (encoding {rows} texts once, cached by 1,000s)")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.sqlite")
    partial.unlink(missing_ok=True)
    with Library(partial) as lib:
        for start in range(0, rows, 1000):
            chunk = texts[start : start + 1000]
            lib.add_vectors([Experience(t, "gsm8k") for t in chunk], cached_encode(default_encoder(), chunk))
    partial.rename(path)
    return path


def _drop_saved_fit(path: Path) -> None:
    """The file as it was before opens kept anything: no index fit, no merged clusters."""
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE IF EXISTS index_fits")
        db.execute("DROP TABLE IF EXISTS merged_clusters")


def _dso(python: str) -> list[str]:
    script = Path(python).parent / "dso"
    return [str(script)] if script.exists() else [python, "-m", "dsonet.cli.main"]


def cold_search(path: Path, runs: int, setups: list[tuple[str, bool]], python: str = sys.executable) -> list[dict]:
    """Median wall seconds of `dso search` in a fresh process, per set-up (encoder backend; the index
    fit and merged clusters kept in the file, or not), the set-ups' runs interleaved. A run without
    them recomputes and keeps them again, so the set-up after it finds them in the file."""
    times: dict[tuple[str, bool], list[float]] = {s: [] for s in setups}
    cmd = [*_dso(python), "search", QUERY, "--db", str(path), "-k", "3", "--min-similarity", "0.3", "--json"]
    for _ in range(runs):
        for backend, kept in setups:
            if not kept:
                _drop_saved_fit(path)
            start = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "DSONET_ENCODER_BACKEND": backend})
            times[backend, kept].append(time.perf_counter() - start)
            if out.returncode or not out.stdout.strip():  # a hit is expected: the query's lesson is in the library
                raise click.ClickException(f"dso search failed ({backend}): {out.stderr.strip()[-400:]}")
    kept_label = {True: "fit and clusters kept in the file", False: "all recomputed"}
    return [{"measure": "cold dso search", "setup": f"{b} encoder, {kept_label[kept]}",
             "median_s": float(np.median(times[b, kept])), "min_s": float(min(times[b, kept])), "runs": runs}
            for b, kept in setups]


def import_seconds(modules: str, python: str = sys.executable, repeats: int = 3) -> float:
    """Median over runs of the summed cumulative import time of the top-level modules `-X importtime` lists."""
    totals = []
    for _ in range(repeats):
        err = subprocess.run([python, "-X", "importtime", "-c", f"import {modules}"], capture_output=True, text=True,
                             check=True).stderr
        top = [int(m.group(1)) for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| \S", err, flags=re.M)]
        totals.append(sum(top) / 1e6)
    return float(np.median(totals))


def import_rows(torch: bool) -> list[dict]:
    search = "dsonet.cli.main, dsonet.cli.library, dsonet.library, dsonet.encoders.default"
    specs = [("dso (the CLI's entry point)", "dsonet.cli.main"),
             ("dso search, numpy encoder", f"{search}, dsonet.encoders.minilm_numpy, dsonet.encoders.zen_numpy")]
    if torch:
        specs.append(("dso search, torch encoder", f"{search}, dsonet.encoders.sentence, dsonet.encoders.zen, "
                                                   "sentence_transformers"))
    return [{"measure": "import time", "setup": name, "median_s": import_seconds(mods), "runs": 3} for name, mods in specs]


def open_rows(path: Path, runs: int) -> list[dict]:
    """`Library(path)` in this process (the encoder is not loaded: the file names its profile)."""
    rows = []
    for kept in (False, True):
        seconds = []
        for _ in range(runs):
            if not kept:
                _drop_saved_fit(path)
            start = time.perf_counter()
            Library(path).close()  # refitted runs keep their fit: the kept runs after them find it
            seconds.append(time.perf_counter() - start)
        rows.append({"measure": "library open (in-process)", "setup": "fit kept in the file" if kept else "refitted",
                     "median_s": float(np.median(seconds)), "min_s": float(min(seconds)), "runs": runs})
    return rows


def encode_rows(torch: bool, n: int = 256) -> tuple[list[dict], dict]:
    texts = corpus_texts(n)[:n]
    encoders = {"numpy": zen_minilm_numpy(), **({"torch": zen_minilm()} if torch else {})}
    rows, vectors = [], {}
    for name, encoder in encoders.items():
        vectors[name] = encoder.encode(texts)
        batch = median_seconds(lambda: encoder.encode(texts), repeats=3, warmup=0)  # noqa: B023 (called here)
        query = median_seconds(lambda: encoder.encode([QUERY], kind="query"), repeats=20)  # noqa: B023
        rows.append({"measure": "encode", "setup": f"{name}, batches of {n} texts", "texts_per_s": n / batch,
                     "median_s": batch, "runs": 3})
        rows.append({"measure": "encode", "setup": f"{name}, one query", "median_s": query, "runs": 20})
    agreement = {}
    if torch:
        cosine = (vectors["numpy"] * vectors["torch"]).sum(1)
        agreement = {"texts": n, "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean())}
    return rows, agreement


def core_install(path: Path, runs: int) -> tuple[list[dict], dict]:
    """``pip install .`` into a fresh venv: its size, its packages, no torch, and a cold search from it."""
    with tempfile.TemporaryDirectory(prefix="dsonet-core-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        start = time.perf_counter()
        subprocess.run([python, "-m", "pip", "install", "-q", str(ROOT)], check=True, capture_output=True)
        install_s = time.perf_counter() - start
        packages = json.loads(subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True,
                                             text=True, check=True).stdout)
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        size = int(subprocess.run(["du", "-sk", site], capture_output=True, text=True, check=True).stdout.split()[0])
        torch = subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
        dsonet_kb = int(subprocess.run(["du", "-sk", f"{site}/dsonet"], capture_output=True, text=True,
                                       check=True).stdout.split()[0])
        search = cold_search(path, runs, [("numpy", True)], python=python)
    info = {"site_packages_mb": round(size / 1024, 1), "dsonet_package_mb": round(dsonet_kb / 1024, 1),
            "packages": len(packages), "package_names": sorted(p["name"] for p in packages),
            "torch_importable": torch, "install_s": round(install_s, 1)}
    rows = [{**r, "setup": f"core install (no torch), {r['setup']}"} for r in search]
    return rows, info


@click.command()
@click.option("--rows", default=10_000, show_default=True, help="Rows in the library searched.")
@click.option("--runs", default=5, show_default=True, help="Cold runs per set-up (median reported).")
@click.option("--no-torch", is_flag=True, help="Leave the torch path out (it is left out anyway where torch is missing).")
@click.option("--no-install", is_flag=True, help="Skip the fresh core install (a minute or two, and PyPI).")
@click.option("--quick", is_flag=True, help="1,000 rows, 2 runs, no core install: a smoke run (writes coldstart-quick.json).")
def cli(rows: int, runs: int, no_torch: bool, no_install: bool, quick: bool) -> None:
    """Cold start: `dso search` from a fresh process on a library of --rows rows, numpy encoder
    beside torch, index fit kept in the file or refitted; import times; library open; encoding
    throughput; the core install's size and package count. Writes bench/results/coldstart.json.

    \b
    Examples:
      dso bench coldstart
      dso bench coldstart --quick
    """
    if quick:
        rows, runs, no_install = 1_000, 2, True
    torch = not no_torch and importlib.util.find_spec("torch") is not None \
        and importlib.util.find_spec("sentence_transformers") is not None
    setups = [(backend, kept) for backend in (["numpy", "torch"] if torch else ["numpy"]) for kept in (False, True)]
    path = library_file(rows)
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dsonet-coldstart-") as tmp:
        work = Path(tmp) / path.name  # a copy: the runs drop and rewrite its saved fit
        shutil.copy(path, work)
        results = cold_search(work, runs, setups)
        results += open_rows(work, runs)
        results += import_rows(torch)
        encode, agreement = encode_rows(torch)
        results += encode
        install = {}
        if not no_install:
            install_rows, install = core_install(work, runs)
            results += install_rows
    columns = ["measure", "setup", "median_s", "min_s", "texts_per_s", "runs"]
    click.echo(format_table(results, columns))
    if agreement:
        click.echo(f"numpy vs torch on {agreement['texts']} texts: cosine min {agreement['cosine_min']:.7f}")
    if install:
        click.echo(f"core install: {install['site_packages_mb']} MB site-packages ({install['dsonet_package_mb']} MB "
                   f"dsonet), {install['packages']} packages, torch importable: {install['torch_importable']}")
    load = [round(before, 2), round(os.getloadavg()[0], 2)]  # the shared machine's load, at the start and the end
    click.echo(f"1-minute load average at the start and the end: {load[0]}, {load[1]} ({os.cpu_count()} cores)")
    out = write_results("coldstart", {"rows_in_library": rows, "runs": runs, "query": QUERY, "rows": results,
                                      "numpy_vs_torch": agreement, "core_install": install, "load_average": load},
                        quick=quick)
    click.echo(f"wrote {out}")
