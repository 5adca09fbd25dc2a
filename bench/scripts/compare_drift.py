"""Two drift runs of one seed, condition by condition: paired 95% bootstrap intervals of new − old over the
change items both answered (controls left out), 10,000 resamples (`dsonet.learn.evaluate.paired_bootstrap`).

    .venv/bin/python bench/scripts/compare_drift.py \\
        bench/results/learn-drift-qwen2.5-coder-0.5b-seed0.json \\
        bench/results/learn-drift-probation-qwen2.5-coder-0.5b-seed0.json \\
        --against fleet=bench/results/learn-drift-qwen2.5-coder-1.5b-seed0.json:without

``--against COND=FILE:COND2`` adds a row: the new run's COND against COND2 of another run on the same items
(e.g. the 0.5B fleet against the 1.5B without lessons).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dsonet.learn.evaluate import paired_bootstrap


def load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--against", action="append", default=[], metavar="COND=FILE:COND2")
    args = ap.parse_args()
    old, new = load(args.old), load(args.new)
    ids = [i["id"] for i in new["items"]]
    if ids != [i["id"] for i in old["items"]]:
        raise SystemExit("the two runs answered different items: compare runs of one seed")
    change = np.flatnonzero(~np.array([i["control"] for i in new["items"]]))

    def correct(run: dict, cond: str) -> np.ndarray:
        return np.asarray(run["correct"][cond], float)[change]

    print("| condition | old | new | new − old |\n|---|---|---|---|")
    for cond in new["correct"]:
        if cond in old["correct"]:
            a, b = correct(new, cond), correct(old, cond)
            lo, hi = paired_bootstrap(a, b)
            print(f"| {cond} | {100 * b.mean():.1f}% | {100 * a.mean():.1f}% | [{100 * lo:+.1f}, {100 * hi:+.1f}] |")
    for spec in args.against:
        cond, _, rest = spec.partition("=")
        path, _, other = rest.rpartition(":")
        third = load(path)
        if [i["id"] for i in third["items"]] != ids:
            raise SystemExit(f"{path} answered different items: compare runs of one seed")
        a, b = correct(new, cond), correct(third, other)
        lo, hi = paired_bootstrap(a, b)
        print(f"| new {cond} − {Path(path).name} {other} | {100 * b.mean():.1f}% | {100 * a.mean():.1f}% | "
              f"[{100 * lo:+.1f}, {100 * hi:+.1f}] |")
    for key in ("poison_rows_hidden", "honest_rows_hidden", "wall_s"):
        print(f"{key}: old {old['facts'].get(key)}, new {new['facts'].get(key)}")


if __name__ == "__main__":
    main()
