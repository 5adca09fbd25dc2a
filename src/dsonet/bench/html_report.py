"""An HTML page beside a benchmark's JSON, for people who would rather look than read numbers: accuracy
per condition with its 95% interval as an inline SVG bar plot, the lessons, and an example prompt.

    write_html_report(path, "dso demo", conditions_from_demo(results),
                      lessons=results["lessons"], example=results["example"])
    write_html_report(path, "bench learn: drift", conditions_from_learn_row(results["rows"][0]))

What it draws is the scenario's report model (`dsonet.sim.report.Condition`), read back from either
JSON. One file that opens offline from disk (mailed, attached to an issue): its style inline, no script,
no font or image from anywhere. Lessons and answers are model- or peer-written text: every string
is escaped (`html.escape`), none becomes markup.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Mapping, Sequence

from dsonet.errors import DsoError
from dsonet.network.web.svg import interval_bars
from dsonet.sim.report import Condition

CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:960px;margin:0 auto;padding:0 16px;color:#222}
h1{font-size:20px}h2{font-size:17px;border-bottom:1px solid #eee;margin-top:24px}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;
vertical-align:top}th{background:#f7f7f7}td.n{text-align:right}.muted{color:#777}
pre{background:#f5f5f5;border:1px solid #ddd;padding:8px;white-space:pre-wrap;word-break:break-word}"""


class ReportError(DsoError, ValueError):
    """Results the report cannot draw (an accuracy outside [0, 1], an interval that does not hold it)."""


def conditions_from_demo(results: Mapping) -> list[Condition]:
    """`dso demo`'s ``conditions``: [{name, n, accuracy, wilson95, minus_without, minus_without_ci95, ...}]."""
    return [Condition(c["name"], c.get("n"), c["accuracy"], _pair(c.get("wilson95")), c.get("minus_without"),
                      _pair(c.get("minus_without_ci95"))) for c in results["conditions"]]


def conditions_from_learn_row(row: Mapping) -> list[Condition]:
    """One row of `dso bench learn`'s JSON: ``accuracy_<name>`` (``accuracy_with`` is "own"), the
    accuracy's interval in ``wilson[name]``, the paired difference to "without" in ``ci95_<name>``."""
    out = []
    for key, value in row.items():
        if not key.startswith("accuracy_") or key.startswith("accuracy_control") or value is None:
            continue
        raw = key.removeprefix("accuracy_")
        name = "own" if raw == "with" else raw
        diff = row.get(f"ci95_{raw}")
        minus = round(value - row["accuracy_without"], 4) if diff is not None else None
        out.append(Condition(name, row.get("n_eval"), value, _pair(row.get("wilson", {}).get(name)), minus,
                             _pair(diff)))
    return out


def write_html_report(path: str | Path, title: str, conditions: Sequence[Condition],
                      lessons: Sequence[str | Mapping] = (), example: Mapping | None = None,
                      notes: Sequence[str] = (), sections: Mapping[str, Mapping] = {}) -> Path:
    """Write the page to ``path`` (its folder made if missing); returns the path. ``lessons``: texts,
    or mappings holding ``text`` and what else to show beside it (node, source, score); ``example``:
    one task as the JSON has it (its ``question``, the ``lessons`` it was given, the answers);
    ``sections``: more such records under headings of their own (the demo's act on the job)."""
    if not conditions:
        raise ReportError("conditions: none given; a report plots at least one condition's accuracy")
    for c in conditions:
        _check(c)
    body = [f"<h1>{escape(title)}</h1>", *(f'<p class="muted">{escape(n)}</p>' for n in notes),
            "<h2>Accuracy per condition</h2>",
            interval_bars([(c.name, c.accuracy, c.wilson95) for c in conditions]),
            '<table id="conditions"><tr><th>condition</th><th>n</th><th>accuracy</th><th>95% interval</th>'
            "<th>note</th></tr>"]
    for c in conditions:
        interval = f"[{c.wilson95[0]:.1%}, {c.wilson95[1]:.1%}]" if c.wilson95 else "–"
        body.append(f'<tr><td>{escape(c.name)}</td><td class="n">{"" if c.n is None else c.n}</td>'
                    f'<td class="n">{c.accuracy:.1%}</td><td>{interval}</td><td>{escape(_note(c))}</td></tr>')
    body.append("</table>")
    if lessons:
        body.append(f"<h2>Lessons ({len(lessons)})</h2>{_lessons(lessons)}")
    if example:
        body.append(f"<h2>An example</h2>{_example(example)}")
    for heading, record in sections.items():
        body.append(f"<h2>{escape(heading)}</h2>{_example(record)}")
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def _check(c: Condition) -> None:
    """A result the page cannot draw is refused, naming the field (an accuracy is passed / n)."""
    if not 0.0 <= c.accuracy <= 1.0:
        raise ReportError(f"{c.name}.accuracy: {c.accuracy!r} is not a share in [0, 1]; give passed / n")
    if c.wilson95 is not None and not 0.0 <= c.wilson95[0] <= c.wilson95[1] <= 1.0:
        raise ReportError(f"{c.name}.wilson95: {c.wilson95!r} is not [low, high] within [0, 1]")


def _note(c: Condition) -> str:
    """The paired difference to the answers without lessons, where one was measured."""
    if c.name == "without" or c.minus_without is None or c.minus_without_ci95 is None:
        return ""
    lo, hi = c.minus_without_ci95
    return f"{c.minus_without:+.1%} vs without, paired 95% [{lo:+.1%}, {hi:+.1%}]"


def _lessons(lessons: Sequence[str | Mapping]) -> str:
    rows = [{"text": item} if isinstance(item, str) else dict(item) for item in lessons]
    extra = sorted({k for r in rows for k in r if k != "text"})
    head = "".join(f"<th>{escape(k)}</th>" for k in extra)
    out = [f'<table id="lessons"><tr><th>lesson</th>{head}</tr>']
    for r in rows:
        cells = "".join(f"<td>{escape(_show(r.get(k, '')))}</td>" for k in extra)
        out.append(f'<tr><td>{escape(str(r.get("text", "")))}</td>{cells}</tr>')
    out.append("</table>")
    return "".join(out)


def _example(example: Mapping) -> str:
    """The question first, then the lessons it was given, then every other field as it was recorded."""
    out = []
    if "question" in example:
        out.append(f'<h3>question</h3><pre id="question">{escape(str(example["question"]))}</pre>')
    given = example.get("lessons")
    if isinstance(given, list) and given:
        out.append(f"<h3>lessons given</h3>{_lessons(given)}")
    for key, value in example.items():
        if key not in ("question", "lessons"):
            out.append(f"<h3>{escape(str(key))}</h3><pre>{escape(_show(value))}</pre>")
    return "".join(out)


def _show(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _pair(value: Sequence[float] | None) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))
