"""The scenario's report model: a condition's accuracy, its Wilson interval and its paired
difference to the answers without lessons on the same tasks."""

import numpy as np

from dsonet.sim.report import measure


def test_a_condition_is_paired_with_the_answers_without_lessons_on_the_same_tasks():
    with_ = np.array([1, 1, 0, 1, 1, 0, 1, 1])
    without = np.array([0, 1, 0, 1, 0, 0, 1, 1])

    c = measure("fleet", with_, without, injected=np.array([1, 1, 0, 0, 1, 1, 1, 1]), from_attackers=[False] * 8,
                no_code=1)

    assert (c.name, c.n, c.accuracy, c.minus_without) == ("fleet", 8, 0.75, 0.25)
    assert c.wilson95[0] < 0.75 < c.wilson95[1]
    assert 0.0 <= c.minus_without_ci95[0] <= 0.25 <= c.minus_without_ci95[1]  # it never loses a task
    assert (c.coverage, c.from_attackers, c.no_code) == (0.75, 0.0, 1)


def test_the_same_answers_differ_by_nothing_and_unmeasured_fields_stay_empty():
    c = measure("without", np.array([1, 0, 1]), np.array([1, 0, 1]))
    assert c.minus_without == 0.0 and c.minus_without_ci95 == (0.0, 0.0)
    assert (c.coverage, c.from_attackers, c.no_code) == (None, None, None)
