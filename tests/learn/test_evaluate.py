import numpy as np
import pytest

from dsonet.learn.evaluate import EvalResult, Run, mcnemar, paired_bootstrap, task_wilson, wilson


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


def test_paired_bootstrap_and_mcnemar_resample_a_repeated_task_once():
    """One task's repeated answers (the same held-out item in several seeds) are one resampled unit:
    the same data repeated gives the same interval, while truly new tasks narrow it."""
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0] * 5, float)
    b = np.zeros_like(a)
    tasks = np.arange(a.size)
    twice = np.concatenate([tasks, tasks])
    once, repeated = paired_bootstrap(a, b, tasks=tasks), paired_bootstrap(np.tile(a, 2), np.tile(b, 2), tasks=twice)
    assert once == paired_bootstrap(a, b) and repeated == pytest.approx(once, abs=1e-12)
    assert np.diff(paired_bootstrap(np.tile(a, 2), np.tile(b, 2))) < np.diff(once)  # as if 80 tasks
    assert mcnemar(np.tile(a, 2), np.tile(b, 2), twice) == mcnemar(a, b)
    # a task whose seeds split (one gained, one lost) is no discordant pair
    assert mcnemar(np.array([1, 0]), np.array([0, 1]), np.array([7, 7])) == 1.0
    assert task_wilson(np.tile(a, 3), np.tile(tasks, 3)) == wilson(a.sum(), a.size)


def _run(correct, parsed=None, injected=None):
    correct = np.array(correct, float)
    return Run(correct, np.ones(correct.size, bool) if parsed is None else np.array(parsed),
               np.zeros(correct.size, bool) if injected is None else np.array(injected), [], [], 50, 0.5)


def test_eval_result_reports_accuracies_the_interval_of_their_difference_coverage_and_parse_failures():
    r = EvalResult(_run([1, 0, 0, 0], parsed=[1, 1, 0, 1]), _run([1, 1, 0, 0], injected=[1, 1, 0, 1]))
    d = r.to_dict()
    assert d["accuracy_without"] == 0.25 and d["accuracy_with"] == 0.5
    assert d["ci95"][0] <= 0.25 <= d["ci95"][1] and d["n_eval"] == 4
    assert d["coverage"] == 0.75 and d["parse_failures"] == {"without": 1, "with": 0} and d["tokens"] == 100


def test_mcnemar_is_the_exact_binomial_test_on_discordant_pairs():
    a = np.array([1] * 10 + [0] * 2 + [1] * 30 + [0] * 20, float)
    b = np.array([0] * 10 + [1] * 2 + [1] * 30 + [0] * 20, float)
    # 10 wins, 2 losses: 2·P(X ≤ 2 | n = 12, p = ½) = 2·79/4096
    assert mcnemar(a, b) == pytest.approx(2 * 79 / 4096)
    assert mcnemar(a, a) == 1.0 and mcnemar(b, a) == mcnemar(a, b)
    assert mcnemar(np.ones(6), np.zeros(6)) == pytest.approx(2 / 64)
