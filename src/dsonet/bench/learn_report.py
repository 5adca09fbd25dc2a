"""The rows of `dso bench learn` (`dsonet.bench.learn`) for the reasoning-gym families: a family's
conditions pooled over its learning seeds, paired against "without" on the same held-out tasks, and the plot
of every family's row."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dsonet.learn.evaluate import mcnemar, paired_bootstrap, task_wilson

CONDITIONS = ("without", "own", "neutral", "fleet", "poisoned", "poison_only", "reference")


def paired(a: np.ndarray, b: np.ndarray, tasks: np.ndarray | None = None) -> dict:
    lo, hi = paired_bootstrap(a, b, tasks=tasks)
    return {"diff": round(float(a.mean() - b.mean()), 4), "ci95": [round(lo, 4), round(hi, 4)],
            "p_mcnemar": round(mcnemar(a, b, tasks), 4)}


def summarise(llm_name: str, family: str, per_seed: list[dict]) -> dict:
    """One row of learn.json: the family's conditions pooled over seeds. Every seed answers the same
    held-out tasks, so the intervals resample tasks with all their seeds' answers."""
    cat = {c: np.concatenate([s["runs"][c].correct for s in per_seed]) for c in CONDITIONS}
    acc = {c: round(float(cat[c].mean()), 4) for c in CONDITIONS}
    cov = {c: round(float(np.mean(np.concatenate([s["runs"][c].injected for s in per_seed]))), 4) for c in CONDITIONS}
    n = int(per_seed[0]["runs"]["without"].correct.size)
    tasks = np.tile(np.arange(n), len(per_seed))
    vs = {c: paired(cat[c], cat["without"], tasks) for c in CONDITIONS[1:]}
    return {
        "llm": llm_name, "task": f"rg:{family}", "n_eval": n, "seeds": len(per_seed),
        "accuracy_without": acc["without"], "accuracy_with": acc["own"], "accuracy_neutral": acc["neutral"],
        "accuracy_fleet": acc["fleet"], "accuracy_poisoned": acc["poisoned"], "accuracy_poison_only": acc["poison_only"],
        "accuracy_reference": acc["reference"],
        "ci95": vs["own"]["ci95"], "ci95_neutral": vs["neutral"]["ci95"], "ci95_fleet": vs["fleet"]["ci95"],
        "ci95_poisoned": vs["poisoned"]["ci95"], "ci95_poison_only": vs["poison_only"]["ci95"],
        "ci95_reference": vs["reference"]["ci95"],
        "p_mcnemar": vs["own"]["p_mcnemar"], "p_mcnemar_all": {c: vs[c]["p_mcnemar"] for c in vs},
        "own_vs_neutral": paired(cat["own"], cat["neutral"], tasks), "fleet_vs_own": paired(cat["fleet"], cat["own"], tasks),
        "wilson": {c: [round(x, 4) for x in task_wilson(cat[c], tasks)] for c in CONDITIONS},
        "coverage": cov["own"], "coverage_all": cov,
        "parse_failures": {c: int(sum(s["runs"][c].parse_failures for s in per_seed)) for c in CONDITIONS},
        "experiences": int(np.mean([len(s["facts"]["lessons"]) for s in per_seed])),
        "tokens": int(sum(s["facts"]["tokens"] for s in per_seed)),
        "wall_s": round(sum(s["facts"]["wall_s"] for s in per_seed), 1),
        "per_seed": [{k: v for k, v in s["facts"].items()} | {"accuracy": {c: round(s["runs"][c].accuracy, 4)
                                                                         for c in CONDITIONS}} for s in per_seed],
    }


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c for c in CONDITIONS if any(c in r["wilson"] for r in rows)]  # older rows lack "reference"
    fig, ax = plt.subplots(figsize=(2.2 + 2.4 * len(rows), 3.6))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        xs = np.arange(len(rows)) + (j - len(names) / 2 + 0.5) * width
        acc = np.array([r["wilson"].get(name, [np.nan, np.nan]) for r in rows])
        mid = np.array([r.get("accuracy_with" if name == "own" else f"accuracy_{name}", np.nan) for r in rows])
        ax.bar(xs, np.nan_to_num(mid), width, label=name, capsize=2,
               yerr=np.nan_to_num([mid - acc[:, 0], acc[:, 1] - mid]))
    ax.set_xticks(np.arange(len(rows)), [f"{r['task']}\nn={r['n_eval']}×{r['seeds']}" for r in rows], fontsize=8)
    ax.set_ylabel("held-out accuracy (Wilson 95%)")
    ax.set_title(f"Lessons on held-out tasks: {rows[0]['llm']}", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
