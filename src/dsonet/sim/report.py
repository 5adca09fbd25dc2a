"""A scenario's report model, shared by its configurations: the demo's typed report
(`dsonet.demo.report`), the rows of `dso bench learn --family drift` (`dsonet.bench.drift`) and
the HTML page beside either (`dsonet.bench.html_report`).

A `Condition` is one condition's held-out accuracy with its Wilson interval, paired with the answers
without lessons on the same tasks; `measure` builds it from per-task correctness. The rest counts
what the fleet holds at the end (`hidden`), what lessons cost in a prompt, and one example.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsonet.learn.evaluate import Run, paired_bootstrap, task_wilson
from dsonet.learn.tasks import TaskSet
from dsonet.sim.nodes import NodeState


@dataclass(frozen=True)
class Condition:
    name: str  # "without", "own", "fleet", ...
    n: int  # held-out tasks answered (change facts; controls apart), each counted once however many seeds
    accuracy: float
    wilson95: tuple[float, float] | None  # the accuracy's 95% interval; None where a result file lacks it
    minus_without: float | None  # paired: the same tasks, answered by the same node without lessons
    minus_without_ci95: tuple[float, float] | None  # paired bootstrap over tasks
    coverage: float | None = None  # share of the prompts that received lessons
    from_attackers: float | None = None  # share of the prompts that received a Byzantine node's lesson
    no_code: int | None = None  # replies with no line of Python in them


def measure(name: str, correct: np.ndarray, without: np.ndarray, injected: np.ndarray | None = None,
            from_attackers: list[bool] | None = None, no_code: int | None = None,
            tasks: np.ndarray | None = None) -> Condition:
    """``correct`` and ``without``: per answer (the same answers, in order), 1 where it passed; ``tasks``:
    each answer's task where a task was answered more than once (pooled seeds), which the intervals
    resample as one."""
    correct, without = np.asarray(correct, float), np.asarray(without, float)
    n = correct.size if tasks is None else np.unique(tasks).size
    return Condition(name, int(n), _r(correct.mean()), _r2(task_wilson(correct, tasks)),
                     _r(correct.mean() - without.mean()), _r2(paired_bootstrap(correct, without, tasks=tasks)),
                     None if injected is None else _r(np.mean(injected)),
                     None if from_attackers is None else _r(np.mean(from_attackers)), no_code)


def _r(x) -> float:
    return round(float(x), 4)


def _r2(pair) -> tuple[float, float]:
    return _r(pair[0]), _r(pair[1])


def hidden(states: list[NodeState], byzantine: set[str]) -> dict:
    """Per honest node (its final `NodeState`), the share of the poison's rows and of honest peers' rows
    hidden because the node skips their signer (under the reputation floor, or convicted by its
    outcomes): the poison's least over the nodes, honest rows' most. An evicted row counts as hidden."""
    poison, honest, dropped = [], [], []
    for state in states:
        rep = {p["node_id"]: p["reputation"] for p in state.peers}
        skipped = {p["node_id"] for p in state.peers if p["skipped"]}
        held = [e for e in state.experiences if e.provenance.node_id != state.node_id]
        bad = [e for e in held if e.provenance.node_id in byzantine]
        good = [e for e in held if e.provenance.node_id not in byzantine]
        down = lambda e: e.provenance.node_id in skipped  # noqa: E731
        poison.append(sum(map(down, bad)) / len(bad) if bad else 1.0)
        honest.append(sum(map(down, good)) / len(good) if good else 0.0)
        dropped.append({"node": state.node_id[:8], "poison_rows": len(bad), "poison_hidden": sum(map(down, bad)),
                        "signers_skipped": sorted(s[:8] for s in skipped),
                        "reputation": {s[:8]: r for s, r in rep.items() if s in byzantine}})
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
                    "without": runs["without"].texts[i],
                    "without_feedback": held.explain(task, runs["without"].texts[i]),
                    "fleet": runs["fleet"].texts[i],
                    "lessons": [{"text": h.experience.text, "author": h.experience.provenance.node_id[:8]}
                                for h in runs["fleet"].hits[i]]}
    return None

