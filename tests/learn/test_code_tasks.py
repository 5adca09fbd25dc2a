"""A user's own code tasks (`dso learn code:<file>`): read, checked in the real sandbox, errors named."""

import json
import sys

import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.learn.code_tasks import imported_modules, load_code_tasks
from dsonet.learn.drift import drift_taskset
from dsonet.learn.sandbox import Sandbox, SandboxError
from dsonet.learn.tasks import TaskError

ROWS = [{"task": "the sum of the elements of a", "setup": "import numpy as np\na = np.array([2, 3, 4])",
         "reference": "r = int(np.sum(a))"},
        {"id": "mean", "task": "the mean of b", "setup": "import statistics\nb = [1, 2, 6]",
         "reference": "r = statistics.mean(b)"}]


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_code_tasks_are_read_with_their_setup_and_reference(tmp_path):
    tasks = load_code_tasks(_write(tmp_path / "t.jsonl", ROWS))
    assert [t.id for t in tasks] == ["t-1", "mean"]
    assert "```python\nimport numpy as np" in tasks[0].question and "assigns to r the sum" in tasks[0].question
    assert tasks[1].entry["reference"] == "r = statistics.mean(b)"
    assert imported_modules(tasks) == ["numpy", "statistics"]


@pytest.mark.parametrize("row, message", [
    ({"task": "x", "setup": "a = 1"}, "missing or empty \\['reference'\\]"),
    ({"task": "x", "setup": "a = 1", "reference": "print(a)"}, "must assign r"),
    ("[1, 2]", "missing or empty"),
])
def test_a_bad_line_is_named_with_its_number_and_the_fix(tmp_path, row, message):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + (row if isinstance(row, str) else json.dumps(row)) + "\n")
    with pytest.raises(TaskError, match=f"t.jsonl:2: .*{message}"):
        load_code_tasks(path)


def test_an_attempt_is_checked_in_the_sandbox_and_its_error_line_explained(tmp_path):
    tasks = load_code_tasks(_write(tmp_path / "t.jsonl", ROWS))
    try:
        sandbox = Sandbox(python=sys.executable, preload=imported_modules(tasks))
    except SandboxError as exc:  # no bubblewrap here: `make system` installs it
        pytest.skip(str(exc))
    with sandbox:
        ts = drift_taskset(tasks, sandbox, "code:t")
        right, wrong = "```python\nr = int(a.sum())\n```", "r = np.add.reduce_all(a)"
        assert ts.verify(tasks[0], right) == 1.0 and ts.verify(tasks[0], wrong) == 0.0
        assert ts.explain(tasks[0], wrong).startswith("AttributeError") and "reduce_all" in ts.explain(tasks[0], wrong)
        assert ts.explain(tasks[1], "r = max(b)") == "r = 6, expected a different value"


def test_dso_learn_refuses_a_code_file_with_a_bad_line_before_loading_a_model(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"task": "x"}\n')
    out = CliRunner().invoke(cli, ["learn", f"code:{path}", "--db", str(tmp_path / "lib.db")])
    assert out.exit_code == 1 and "t.jsonl:1: missing or empty ['setup', 'reference']" in out.output
