"""A user's own code tasks: what `dso learn code:<file>` practises on, in the user's own environment.

One JSON object per line: ``{"id"?, "task", "setup", "reference"}``. ``setup`` is code that has run
(imports, data); ``task`` says what to compute, without naming the function to call; ``reference``
is one line that assigns the right ``r``. An attempt passes when setup + its code runs in the sandbox
(`dsonet.learn.sandbox`, over the interpreter of the environment to learn: ``--python``) and its ``r``
equals the reference's, as in the `drift` family; the learner sees each attempt's error line.

    {"task": "the integral of y over x by the trapezoidal rule", "setup": "import numpy as np\\nx = np.linspace(0, 1, 5)\\ny = x**2", "reference": "r = np.trapezoid(y, x)"}
"""

from __future__ import annotations

import re
from pathlib import Path

from dsonet.learn.tasks import Task, TaskError, jsonl_rows

FIELDS = ("task", "setup", "reference")


def question(setup: str, task: str) -> str:
    """The prompt of a code task: the setup shown, then what to assign to r (as the drift family asks)."""
    return f"The code below has run.\n```python\n{setup}\n```\nWrite one line of Python that assigns to r {task}."


def load_code_tasks(path: str | Path, domain: str = "code.python") -> list[Task]:
    """The tasks of a JSONL file, each with its setup and reference in ``entry`` (what `drift.check` runs)."""
    path = Path(path)
    tasks = []
    for no, row in jsonl_rows(path, '{"task", "setup", "reference"}'):
        missing = [f for f in FIELDS if not isinstance(row, dict) or not isinstance(row.get(f), str) or not row[f].strip()]
        if missing:
            raise TaskError(f"{path}:{no}: missing or empty {missing}; each line needs "
                            f"{{\"task\", \"setup\", \"reference\"}} strings")
        if not row["reference"].lstrip().startswith("r") or "=" not in row["reference"]:
            raise TaskError(f"{path}:{no}: reference {row['reference']!r} must assign r, e.g. 'r = np.trapezoid(y, x)'")
        task_id = str(row.get("id", f"{path.stem}-{no}"))
        tasks.append(Task(task_id, question(row["setup"], row["task"]), row["reference"], domain,
                          {"fact": task_id, "setup": row["setup"], "reference": row["reference"], "control": False}))
    if not tasks:
        raise TaskError(f"tasks: {path} holds no task")
    return tasks


def imported_modules(tasks: list[Task]) -> list[str]:
    """The top-level modules the tasks' setups import: what the sandbox's worker imports once."""
    names = set()
    for t in tasks:
        for m in re.finditer(r"^\s*(?:import|from)\s+([A-Za-z_][\w.]*)", t.entry["setup"], re.MULTILINE):
            names.add(m.group(1).split(".")[0])
    return sorted(names)
