"""`dso bench learn`'s own logic: the neutral control, the measured threshold, the pooled row."""

import numpy as np
import pytest

from dsonet.bench.learn_pilot import KEPT
from dsonet.bench.learn_report import CONDITIONS, paired, summarise
from dsonet.learn.control import neutral_notes
from dsonet.learn.context import measured_threshold as threshold
from dsonet.learn.evaluate import Run
from dsonet.learn.tasks import FAMILIES


def test_neutral_notes_have_the_lessons_word_counts_and_say_nothing_about_tasks():
    notes = neutral_notes([12, 7, 20])
    assert [len(n.split()) for n in notes] == [12, 7, 20]
    assert all(n.endswith(".") and not n.lower().startswith("when") for n in notes)
    assert neutral_notes([]) == []


def test_the_threshold_is_the_protocols_when_half_pass_else_a_measured_percentile():
    assert threshold(np.array([0.7, 0.65, 0.2, 0.61])) == 0.6
    scores = np.linspace(0.1, 0.5, 11)
    assert threshold(scores) == pytest.approx(np.percentile(scores, 20))
    assert threshold(np.array([])) == 0.6


def test_every_kept_family_has_a_poison_and_a_correct_reference_lesson():
    assert set(KEPT) <= set(FAMILIES)
    benched = [f for f in FAMILIES.values() if f.poison]
    assert {"aiw", *KEPT} <= {f.generator for f in benched}
    for f in benched:
        assert len(f.poison) == 3 and all(t.startswith("When") for t in f.poison)
        assert f.reference.startswith("When") and len(f.reference.split()) <= 32 and f.reference not in f.poison


def _run(correct, injected=False):
    c = np.array(correct, float)
    return Run(c, np.ones(c.size, bool), np.full(c.size, injected), [""] * c.size, [[]] * c.size, 10, 1.0)


def test_a_summary_row_pools_seeds_and_compares_every_condition_with_no_lessons():
    base = [1, 0] * 50
    runs = {c: _run(base) for c in CONDITIONS}
    runs["own"] = _run([1, 1] * 50, injected=True)
    runs["poison_only"] = _run([0, 0] * 50, injected=True)
    seed = {"runs": runs, "facts": {"lessons": ["When x, y."], "tokens": 5, "wall_s": 2.0}}
    row = summarise("m", "letter_counting", [seed, seed])
    assert row["n_eval"] == 100 and row["seeds"] == 2 and row["accuracy_with"] == 1.0
    assert row["accuracy_without"] == 0.5 and row["accuracy_poison_only"] == 0.0
    assert 0.35 < row["ci95"][0] < 0.5 < row["ci95"][1] < 0.65 and row["p_mcnemar"] < 1e-10 and row["coverage"] == 1.0
    assert row["ci95"] == summarise("m", "letter_counting", [seed])["ci95"]  # the same tasks again: no new evidence
    assert row["ci95_neutral"] == [0.0, 0.0] and row["p_mcnemar_all"]["neutral"] == 1.0
    assert row["own_vs_neutral"]["diff"] == 0.5 and row["tokens"] == 10
    assert set(row["wilson"]) == set(CONDITIONS) and row["parse_failures"]["own"] == 0
    assert paired(np.ones(4), np.ones(4)) == {"diff": 0.0, "ci95": [0.0, 0.0], "p_mcnemar": 1.0}
