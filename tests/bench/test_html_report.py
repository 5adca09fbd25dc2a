"""The HTML report beside a benchmark's JSON: a bar and an interval per condition, the lessons and
the example as text (escaped: lessons are model- and peer-written), and results it cannot draw refused."""

import json
import re
from pathlib import Path

import pytest

from dsonet.bench.html_report import ReportError, conditions_from_demo, conditions_from_learn_row, write_html_report
from dsonet.sim.report import Condition

RESULTS = Path(__file__).parents[2] / "bench" / "results"
PAYLOAD = "When asked, do <script>alert(1)</script> and </td></table><b id=x>"


def test_a_demo_report_plots_each_condition_with_its_interval_and_shows_lessons_and_example_as_text(tmp_path):
    results = {"conditions": [{"name": "without", "n": 120, "accuracy": 0.25, "wilson95": [0.18, 0.33],
                               "minus_without": 0.0, "minus_without_ci95": [0.0, 0.0]},
                              {"name": "fleet", "n": 120, "accuracy": 0.39, "wilson95": [0.31, 0.48],
                               "minus_without": 0.142, "minus_without_ci95": [0.083, 0.208]}],
               "lessons": [{"node": "node0", "text": PAYLOAD}],
               "example": {"question": "What is <b>2+2</b>?", "lessons": [{"source": "node3", "text": PAYLOAD}],
                           "fleet": "r = 4"}}
    job = {"question": "Integrate <i>z</i>", "lessons": [PAYLOAD], "agent B again": "r = 1\n-> passed"}
    page = write_html_report(tmp_path / "out" / "demo.html", "dso demo", conditions_from_demo(results),
                             lessons=results["lessons"], example=results["example"],
                             sections={"On the job": job}).read_text()
    assert re.findall(r'class="bar" data-name="([^"]+)"', page) == ["without", "fleet"]
    assert page.count('class="interval"') == 2
    assert "+14.2% vs without, paired 95% [+8.3%, +20.8%]" in page
    assert "<script" not in page and "<b id=x>" not in page and "<b>2+2</b>" not in page
    # the lesson, the example's lesson and the act's lesson, each escaped
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3
    assert "<h2>On the job</h2>" in page and "Integrate &lt;i&gt;z&lt;/i&gt;" in page and "-&gt; passed" in page
    assert "What is &lt;b&gt;2+2&lt;/b&gt;?" in page and "r = 4" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing from elsewhere


def test_a_learn_row_gives_every_condition_own_for_with_and_leaves_the_controls_out():
    row = json.loads((RESULTS / "learn-drift.json").read_text())["rows"][0]
    conditions = {c.name: c for c in conditions_from_learn_row(row)}
    assert "control_without" not in conditions and "with" not in conditions
    assert conditions["own"].accuracy == row["accuracy_with"]
    assert conditions["own"].wilson95 == tuple(row["wilson"]["own"])
    assert conditions["fleet"].minus_without_ci95 == tuple(row["ci95_fleet"])
    assert conditions["fleet"].minus_without == round(row["accuracy_fleet"] - row["accuracy_without"], 4)
    assert len(conditions) == sum(1 for k in row if k.startswith("accuracy_") and "control" not in k)


@pytest.mark.parametrize("conditions, field", [
    ([Condition("fleet", 10, 1.3, None, None, None)], "fleet.accuracy"),
    ([Condition("fleet", 10, 0.4, (0.5, 0.3), None, None)], "fleet.wilson95"),
    ([], "conditions"),
])
def test_results_it_cannot_draw_are_refused_naming_the_field(tmp_path, conditions, field):
    with pytest.raises(ReportError, match=f"^{re.escape(field)}"):
        write_html_report(tmp_path / "never-written.html", "t", conditions)
    assert not (tmp_path / "never-written.html").exists()
