"""The rows of `dso bench agents`: per condition, what the agents' runs on the held-out tasks showed.

Every condition runs the same held-out tasks, each by the same agent, with the same prompts,
sampling and token limits: only the lessons the proxy injects differ. Per condition, over the
change facts' tasks (the controls apart): the first-try pass rate, the share solved within the
run's tries, tries per solved task, and tokens per solved task (prompt + completion tokens of
every try of every task, solved or not, over the tasks solved: what a solution cost). Between
conditions, paired 95% intervals of the differences in rates, resampling tasks
(`dsonet.learn.evaluate.paired_bootstrap`).
"""

from __future__ import annotations

import numpy as np

from dsonet.bench.agent_loop import RunRecord
from dsonet.learn.evaluate import paired_bootstrap

CONDITIONS = ("none", "own", "fleet", "poisoned", "poisoned_after_feedback")
PAIRS = {"fleet": ("fleet", "none"), "fleet_vs_own": ("fleet", "own"), "own": ("own", "none"),
         "poisoned": ("poisoned", "none"), "poisoned_after_feedback": ("poisoned_after_feedback", "none")}


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def per_task(records: list[RunRecord]) -> dict[str, np.ndarray]:
    """Each run's first-try pass, solved, tries and tokens, in the records' order."""
    return {"first_try": np.array([r.first_try for r in records], float),
            "solved": np.array([r.solved for r in records], float),
            "tries": np.array([len(r.tries) for r in records], float),
            "tokens": np.array([r.tokens for r in records], float),
            "close_tokens": np.array([r.close_tokens for r in records], float)}


def per_solved(values: np.ndarray, solved: np.ndarray) -> float | None:
    """Tokens (or tries) spent on every task over the tasks solved; None when none was solved."""
    return float(values.sum() / solved.sum()) if solved.sum() else None


def row(framework: str, model: str, tries: int, records: dict[str, list[RunRecord]], control: np.ndarray,
        poison_ids: set[str]) -> dict:
    """One row of agents.json: ``records[c]`` holds condition c's runs of the held-out tasks in one order;
    ``control`` marks the control tasks (reported apart); ``poison_ids`` the poisoner's lesson ids."""
    change = ~control
    task_ids = np.array([r.task_id for r in records["none"]])
    data = {c: per_task(records[c]) for c in CONDITIONS if c in records}
    out: dict = {"framework": framework, "model": model, "tries": tries, "n_eval": int(change.sum()),
                 "n_control": int(control.sum())}
    for metric, key in (("first_try", "first_try"), ("solved_within_3", "solved")):
        for c, d in data.items():
            out[f"{metric}_{c}"] = _r(d[key][change].mean()) if change.any() else None
        for name, (a, b) in PAIRS.items():
            if a in data and b in data:
                lo, hi = paired_bootstrap(data[a][key][change], data[b][key][change], tasks=task_ids[change])
                out[f"ci95_{metric}_{name}"] = [_r(lo), _r(hi)]
    for c, d in data.items():
        out[f"tries_per_solved_{c}"] = _r(per_solved(d["tries"][change], d["solved"][change]))
        out[f"tokens_per_solved_{c}"] = _r(per_solved(d["tokens"][change], d["solved"][change]))
    none, fleet = out.get("tokens_per_solved_none"), out.get("tokens_per_solved_fleet")
    out["tokens_per_solved_fleet_vs_none"] = _r(fleet / none) if none and fleet else None
    # a framework's run may make no try (its agent answered without running code): it counts as uncovered
    first = {c: [r.tries[0].lessons if r.tries else () for r in records[c]] for c in data}
    out["coverage"] = {c: _r(np.mean([bool(lessons) for lessons in first[c]])) for c in data}
    out["poison_in_first_prompt"] = {c: _r(np.mean([bool(set(lessons) & poison_ids) for lessons in first[c]]))
                                     for c in data}
    if control.any():
        out["controls"] = {c: {"first_try": _r(d["first_try"][control].mean()),
                               "solved": _r(d["solved"][control].mean())} for c, d in data.items()}
    out["close_tokens"] = {c: int(d["close_tokens"].sum()) for c, d in data.items()}
    return out


COLUMNS = ["framework", "model", "practice_model", "n_eval", "first_try_none", "first_try_own", "first_try_fleet",
           "first_try_poisoned", "first_try_poisoned_after_feedback", "solved_within_3_none", "solved_within_3_fleet",
           "tokens_per_solved_none", "tokens_per_solved_fleet", "poison_rows_hidden", "honest_rows_hidden"]


def combined(results: dict[str, dict]) -> dict:
    """One table of rows from several runs' results (name → that run's JSON), a row per
    (framework, model, the model the fleet learned with), each naming its run and keeping its plan: a
    long run goes in pieces, one framework or model at a time, and the table is what
    `bench/results/agents.json` holds."""
    rows, seen = [], {}
    for name, data in results.items():
        for r in data["rows"]:
            key = (r["framework"], r["model"], r.get("practice_model", r["model"]))
            if key in seen:
                raise ValueError(f"{name} and {seen[key]} both hold a row for framework {key[0]!r}, model {key[1]!r}, "
                                 f"practice model {key[2]!r}: name one run per (framework, model, practice model)")
            seen[key] = name
            rows.append({**r, "source": name, "plan": data["plan"], "machine": data.get("machine")})
    return {"benchmark": "agents", "rows": rows, "combined_from": list(results)}
