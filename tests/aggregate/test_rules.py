import numpy as np
import pytest

from dsonet.aggregate import RULE_NAMES, AggregationError, make_rule


@pytest.mark.parametrize("name", [r for r in RULE_NAMES if r != "mean"])
def test_every_robust_rule_drops_far_vectors_and_keeps_most_of_the_crowd(name, cloud):
    honest = cloud(200, seed=0)
    rng = np.random.default_rng(1)
    far = (honest.mean(axis=0) + 3.0 * rng.choice([-1.0, 1.0], size=(40, honest.shape[1]))).astype(np.float32)
    x = np.concatenate([honest, far])
    admission = make_rule(name).admit(x, x)
    assert not admission.keep[200:].any()
    assert admission.keep[:200].mean() >= 0.7  # Multi-Krum drops its assumed 30% whatever they are


def test_mean_rule_keeps_everything(cloud):
    x = cloud(50, seed=2)
    assert make_rule("mean").admit(x, x).keep.all()


def test_deltasoup_rule_uses_tau(cloud):
    x = cloud(100, seed=3)
    strict, lax = make_rule("deltasoup", tau=0.5).admit(x, x), make_rule("deltasoup", tau=50).admit(x, x)
    assert lax.keep.all() and strict.keep.sum() < len(x)
    np.testing.assert_array_equal(strict.scores, lax.scores)


def test_unknown_rule_lists_the_choices():
    with pytest.raises(AggregationError, match="choose one of .*krum"):
        make_rule("fedavg")
