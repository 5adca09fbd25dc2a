"""`dso bench all`: run every benchmark, then write bench/REPORT.md from their JSON results.

Each benchmark runs in its own process (`dso bench <name>`), so one benchmark's memory and
threads do not colour the next one's numbers, and one failure does not stop the rest.
"""

from __future__ import annotations

import subprocess
import sys
import time

import click

from dsonet.bench.report import RESULTS_DIR
from dsonet.bench.summary import write_report

# (name, extra arguments for a run that fits 2 cores in a few minutes)
BENCHMARKS = [
    ("codec", []),
    ("retrieval", []),
    ("crossmodel", []),
    ("robustness", []),
    ("network", []),
    ("learn", []),
    ("train", []),
    ("coldstart", []),
    ("relevance", []),
    ("page", []),
]


@click.command()
@click.option("--quick", is_flag=True, help="Pass --quick to every benchmark (a few minutes in all). Quick runs write *-quick.json, "
              "so the report keeps the last full results.")
@click.option("--only", multiple=True, help="Run only these benchmarks (repeatable), e.g. --only codec.")
@click.option("--report-only", is_flag=True, help="Do not run anything; rebuild bench/REPORT.md from the JSON files.")
def cli(quick: bool, only: tuple[str, ...], report_only: bool) -> None:
    """Run every benchmark (codec, retrieval, crossmodel, robustness, network, learn, train, coldstart,
    relevance, page) and write bench/REPORT.md, which puts each figure beside the papers' and beside the
    library a user would pick instead, and says where a paper's figure is out of reach.

    \b
    Examples:
      dso bench all --quick
      dso bench all --only codec --only retrieval
      dso bench all --report-only
    """
    failed = []
    if not report_only:
        for name, args in BENCHMARKS:
            if only and name not in only:
                continue
            cmd = [sys.executable, "-m", "dsonet.cli.main", "bench", name, *args, *(["--quick"] if quick else [])]
            click.echo(f"\n=== dso bench {name} {' '.join(cmd[5:])}".rstrip())
            start = time.perf_counter()
            code = subprocess.call(cmd)
            click.echo(f"=== {name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {time.perf_counter() - start:.0f} s")
            if code:
                failed.append(name)
    path = write_report(RESULTS_DIR)
    click.echo(f"\nwrote {path}")
    if failed:
        raise click.ClickException(f"benchmarks that failed: {', '.join(failed)}; their old results (if any) are in the report")
