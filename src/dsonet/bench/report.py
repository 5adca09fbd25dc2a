"""What every benchmark shares: timing by median, a printed table, a JSON file of results."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

RESULTS_DIR = Path("bench/results")


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of fn over `repeats` runs (machines are shared and noisy)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
        return "-" if v is None else str(v)

    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def machine() -> dict:
    return {"python": platform.python_version(), "cpu_count": os.cpu_count(), "machine": platform.machine()}


def write_results(name: str, data: dict, results_dir: Path = RESULTS_DIR, quick: bool = False) -> Path:
    """Write bench/results/NAME.json, or NAME-quick.json for a --quick run: a smoke run never
    replaces the full results that bench/REPORT.md and the README are built from."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / (f"{name}-quick.json" if quick else f"{name}.json")
    path.write_text(json.dumps({**data, "machine": machine()}, indent=2) + "\n")
    return path
