"""The rows of `dso bench learn --family drift --mixed` (`dsonet.bench.drift_mixed`): one per environment,
pooled over seeds, with paired 95% intervals as the single-environment drift rows have, and the issue's
targets judged on them.

Accuracies are over the change facts' held-out items (the controls apart, as in the drift rows); every
seed answers the same items, so an interval resamples items with all their seeds' answers. The scoped
fleet and the unscoped one (today's behaviour) answer the same items with the same agents, so their
difference is paired too.
"""

from __future__ import annotations

import numpy as np

from dsonet.bench.report import format_table
from dsonet.learn.evaluate import paired_bootstrap

CONDITIONS = ("fleet", "poisoned", "after_feedback")
COLUMNS = ("env", "n_eval", "accuracy_without", "accuracy_fleet_unscoped", "accuracy_fleet_scoped",
           "ci95_fleet_scoped", "ci95_scoped_vs_unscoped", "wrong_scope_injection_rate",
           "wrong_scope_injection_rate_unscoped", "honest_signers_hidden", "honest_signers_hidden_unscoped",
           "poison_rows_hidden")


def _r(x: float) -> float:
    return round(float(x), 4)


def env_row(env: str, pins: list[str], seeds: list[dict]) -> dict:
    """One environment's row over every seed's two fleets."""
    items = [it for s in seeds for it in s["scoped"]["items"]]
    ids = np.array([it["id"] for it in items])
    classes = np.array([it["class"] for it in items])
    change = classes != "controls_hold"

    def cat(fleet: str, cond: str) -> np.ndarray:
        return np.concatenate([np.array(s[fleet]["correct"][cond][env], float) for s in seeds])

    got = {"without": cat("scoped", "without")}
    for c in CONDITIONS:
        got[f"{c}_scoped"], got[f"{c}_unscoped"] = cat("scoped", c), cat("unscoped", c)

    def ci(a: str, b: str, mask: np.ndarray = change) -> list[float]:
        return [_r(x) for x in paired_bootstrap(got[a][mask], got[b][mask], tasks=ids[mask])]

    def nodes(fleet: str) -> list[dict]:
        return [n for s in seeds for n in s[fleet]["nodes"] if n["env"] == env]

    def wrong(fleet: str) -> float:
        return _r(np.mean([w for s in seeds for w in s[fleet]["wrong_scope"][env]]))

    row = {"env": pins, "n_eval": int(np.unique(ids[change]).size), "n_answers": int(change.sum()),
           "accuracy_without": _r(got["without"][change].mean())}
    for c in CONDITIONS:
        for f in ("unscoped", "scoped"):
            row[f"accuracy_{c}_{f}"] = _r(got[f"{c}_{f}"][change].mean())
            row[f"ci95_{c}_{f}"] = ci(f"{c}_{f}", "without")
        row[f"ci95_{c}_scoped_vs_unscoped"] = ci(f"{c}_scoped", f"{c}_unscoped")
    row["ci95_scoped_vs_unscoped"] = row["ci95_fleet_scoped_vs_unscoped"]
    row["wrong_scope_injection_rate"], row["wrong_scope_injection_rate_unscoped"] = wrong("scoped"), wrong("unscoped")
    for f, suffix in (("scoped", ""), ("unscoped", "_unscoped")):
        row[f"honest_signers_hidden{suffix}"] = sum(n["honest_signers_hidden"] for n in nodes(f))
        row[f"poisoner_hidden_on{suffix}"] = _r(np.mean([n["poisoner_hidden"] for n in nodes(f)]))
        row[f"poison_rows_hidden{suffix}"] = min(n["poison_rows_hidden"] for n in nodes(f))
    if (~change).any():
        row["accuracy_control"] = {k: _r(got[k][~change].mean()) for k in ("without", "fleet_unscoped", "fleet_scoped")}
    row["by_class"] = {c: {"n": int(np.unique(ids[classes == c]).size),
                           **{k: _r(got[k][classes == c].mean()) for k in ("without", "fleet_unscoped", "fleet_scoped")}}
                       for c in dict.fromkeys(classes)}
    return row


def summarise(seeds: list[dict], env_pins: dict[str, list[str]]) -> tuple[list[dict], dict]:
    """The rows (one per environment) and each target of the bench with its value and whether it is met."""
    rows = [env_row(e, pins, seeds) for e, pins in env_pins.items()]
    old = rows[list(env_pins).index("old")]
    honest_nodes = [n for s in seeds for n in s["scoped"]["nodes"]]
    targets = {}
    for e, row in zip(env_pins, rows):
        lo, _ = row["ci95_fleet_scoped"]
        targets[f"{e}: fleet scoped - none above 0 (95% interval above 0)"] = {
            "value": [_r(row["accuracy_fleet_scoped"] - row["accuracy_without"]), row["ci95_fleet_scoped"]],
            "met": lo > 0}
        d = row["accuracy_fleet_scoped"] - row["accuracy_fleet_unscoped"]
        targets[f"{e}: fleet scoped - fleet unscoped not below 0 (difference >= 0, interval reaching 0 or above)"] = {
            "value": [_r(d), row["ci95_scoped_vs_unscoped"]], "met": d >= 0 and row["ci95_scoped_vs_unscoped"][1] >= 0}
    targets["old: newer lessons injected where their scope contradicts < 2% of prompts"] = {
        "value": old["wrong_scope_injection_rate"], "met": old["wrong_scope_injection_rate"] < 0.02}
    hidden = sum(r["honest_signers_hidden"] for r in rows)
    targets["after feedback no honest signer hidden on any honest node (scoped)"] = {
        "value": hidden, "unscoped": sum(r["honest_signers_hidden_unscoped"] for r in rows), "met": hidden == 0}
    share = _r(np.mean([n["poisoner_hidden"] for n in honest_nodes]))
    targets["poisoner hidden on >= 90% of honest nodes (scoped)"] = {"value": share, "met": share >= 0.9}
    targets["single-environment drift rows no worse"] = {
        "value": "not measured by this bench: rerun `dso bench learn --family drift`", "met": None}
    return rows, targets


def table(rows: list[dict]) -> str:
    short = [{**r, "env": " ".join(p for p in r["env"] if not p.startswith("python"))} for r in rows]
    return format_table(short, COLUMNS)
