"""What a scenario counts at the end, shared by its configurations (the demo's typed report in
`dsonet.demo.report`, the rows of `dso bench learn --family drift` in `dsonet.bench.drift`)."""

from __future__ import annotations

import numpy as np

from dsonet.aggregate import DeltaSoupConfig
from dsonet.learn.evaluate import Run
from dsonet.learn.tasks import TaskSet
from dsonet.sim.nodes import NodeState


def hidden(states: list[NodeState], byzantine: set[str], floor: float = DeltaSoupConfig().rep_floor) -> dict:
    """Per honest node (its final `NodeState`), the share of the poison's rows and of honest peers' rows
    hidden because their signer's reputation fell under the floor: the poison's least over the nodes,
    honest rows' most. An evicted row counts as hidden."""
    poison, honest, dropped = [], [], []
    for state in states:
        rep = {p["node_id"]: p["reputation"] for p in state.peers}
        held = [e for e in state.experiences if e.provenance.node_id != state.node_id]
        bad = [e for e in held if e.provenance.node_id in byzantine]
        good = [e for e in held if e.provenance.node_id not in byzantine]
        down = lambda e: rep.get(e.provenance.node_id, 1.0) < floor  # noqa: E731
        poison.append(sum(map(down, bad)) / len(bad) if bad else 1.0)
        honest.append(sum(map(down, good)) / len(good) if good else 0.0)
        dropped.append({"node": state.node_id[:8], "poison_rows": len(bad), "poison_hidden": sum(map(down, bad)),
                        "signers_under_floor": sorted(s[:8] for s, r in rep.items() if r < floor)})
    return {"poison_rows_hidden": round(min(poison), 4), "honest_rows_hidden": round(max(honest), 4),
            "poison_rows_hidden_per_node": [round(p, 4) for p in poison],
            "honest_rows_hidden_per_node": [round(h, 4) for h in honest], "dropped": dropped}


def lesson_tokens(run: Run) -> float:
    """Mean prompt tokens the injected lessons cost per prompt that received any (words x 4/3)."""
    used = [sum(len(h.experience.text.split()) for h in hits) * 4 / 3 for hits in run.hits if hits]
    return round(float(np.mean(used)), 1) if used else 0.0


def example(held: TaskSet, runs: dict) -> dict | None:
    """One held-out task that failed without lessons and passed with the fleet's, with both replies."""
    for i, task in enumerate(held.tasks):
        if runs["without"].correct[i] < 1 and runs["fleet"].correct[i] >= 1 and runs["fleet"].hits[i]:
            return {"task": task.question, "fact": task.entry["fact"],
                    "without": runs["without"].texts[i], "without_feedback": held.explain(task, runs["without"].texts[i]),
                    "fleet": runs["fleet"].texts[i],
                    "lessons": [{"text": h.experience.text, "author": h.experience.provenance.node_id[:8]}
                                for h in runs["fleet"].hits[i]]}
    return None

