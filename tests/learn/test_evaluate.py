import numpy as np
import pytest

from dsonet.learn.evaluate import EvalResult, paired_bootstrap, wilson


def test_wilson_matches_the_textbook_value_and_stays_inside_zero_one():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 10)[1] > 0.2


def test_paired_bootstrap_is_zero_width_for_identical_runs_and_excludes_zero_for_clear_gains():
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0] * 5, float)
    assert paired_bootstrap(a, a) == (0.0, 0.0)
    better = a.copy()
    better[a == 0] = 1
    lo, hi = paired_bootstrap(better, a)
    assert 0 < lo <= 0.5 <= hi <= 0.75


def test_eval_result_reports_accuracies_and_the_interval_of_their_difference():
    r = EvalResult(4, 1, np.array([1, 0, 0, 0.0]), np.array([1, 1, 0, 0.0]), tokens=100, wall_s=1.0)
    d = r.to_dict()
    assert d["accuracy_without"] == 0.25 and d["accuracy_with"] == 0.5
    assert d["ci95"][0] <= 0.25 <= d["ci95"][1] and d["n_eval"] == 4
