"""The codec's and retrieval's figures of two trees side by side (issue 38's Proof: none worse beyond noise).

Each tree runs the benches itself, alternately on one machine, so both sides meet the same load:

    git worktree add /work/wt-before 7dd85c3; git worktree add /work/wt-after HEAD   # + the built _kernels*.so
    for t in before after; do (cd /work/wt-$t && PYTHONPATH=src dso bench codec --quick); done
    for t in before after; do (cd /work/wt-$t && PYTHONPATH=src dso bench retrieval); done
    .venv/bin/python bench/scripts/before_after.py /work/wt-before /work/wt-after --json bench/results/library-before-after.json

It reads each tree's bench/results/codec-quick.json and retrieval.json and prints, per figure, before,
after and after / before.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path


def codec(tree: Path) -> dict[str, float]:
    data = json.loads((tree / "bench/results/codec-quick.json").read_text())
    out = {}
    for t in data["throughput"]:
        for what in ("compress_vectors_per_s", "decompress_vectors_per_s"):
            out[f"codec {t['method']} d={t['dim']} {what}"] = t[what]
    for r in data["rows"]:
        out[f"codec {r['space']} {r['method']} d={r['dim']} g={r['group_size']} recall_at_10"] = r["recall_at_10"]
    return out


def retrieval(tree: Path) -> dict[str, float]:
    data = json.loads((tree / "bench/results/retrieval.json").read_text())
    out = {}
    for r in data["rows"]:
        if r["index"].startswith("dsonet"):  # faiss's rows are the same library on both sides
            for what in ("p50_ms", "recall_at_10"):
                out[f"retrieval {r['space']} {r['index']} n={r['n']} {what}"] = r[what]
    return out


def commit(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--json", type=Path, help="write the table here")
    args = ap.parse_args()
    before = codec(args.before) | retrieval(args.before)
    after = codec(args.after) | retrieval(args.after)
    rows = [{"figure": k, "before": before[k], "after": after[k], "ratio": after[k] / before[k] if before[k] else None}
            for k in before if k in after]
    width = max(len(r["figure"]) for r in rows)
    print(f"{'figure':<{width}}  {'before':>12}  {'after':>12}  after/before")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        print(f"{r['figure']:<{width}}  {r['before']:>12.4g}  {r['after']:>12.4g}  {ratio}")
    if args.json:
        args.json.write_text(json.dumps({"before": commit(args.before), "after": commit(args.after), "rows": rows,
                                         "command": "bench/scripts/before_after.py"}, indent=2) + "\n")


if __name__ == "__main__":
    main()
