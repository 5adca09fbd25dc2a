import numpy as np
import pytest

from dsonet.aggregate import DeltaSoupConfig
from dsonet.encoders.cache import cached_encode
from dsonet.sim import corpus as corpus_mod
from dsonet.sim.attacks import attack
from dsonet.sim.fleet import Contender, FleetSpec, MemoEncoder, SimulatedFleet
from dsonet.sim.texts import garbage_texts, harmful_texts


@pytest.fixture(scope="module")
def small(minilm):
    """The first 60 usable GSM8K items, encoded by the real MiniLM."""
    questions, docs, owner = corpus_mod.texts()
    keep = owner < 60
    docs = tuple(d for d, k in zip(docs, keep) if k)
    corpus = corpus_mod.Corpus(questions[:60], docs, owner[keep], cached_encode(minilm, list(questions[:60]), "query"),
                               cached_encode(minilm, list(docs), "document"))
    harmful, garbage = harmful_texts(), garbage_texts()
    hv, gv = cached_encode(minilm, list(harmful), "document"), cached_encode(minilm, list(garbage), "document")
    own = MemoEncoder(minilm, list(docs) + list(harmful) + list(garbage), np.concatenate([corpus.d_vectors, hv, gv]))
    fleet = SimulatedFleet(corpus, FleetSpec(n_nodes=20, n_items=60, n_eval=20, n_feedback=20), minilm.id, harmful, garbage, gv)
    return fleet, own


@pytest.mark.slow
def test_hijack_breaks_the_median_but_not_deltasoup_with_its_defences(small):
    fleet, own = small
    clean = fleet.run(fleet.traffic(attack("withholding"), 0.3), Contender("mean", "mean", DeltaSoupConfig.paper(seed=0)))
    traffic = fleet.traffic(attack("hijack"), 0.3)
    median = fleet.run(traffic, Contender("median", "median", DeltaSoupConfig.paper(seed=0)), encoder=own)
    ours = fleet.run(traffic, Contender("deltasoup", "deltasoup", DeltaSoupConfig(seed=0)), encoder=own)
    assert clean.accuracy >= 0.8
    assert median.accuracy < 0.5 * clean.accuracy and median.attacker_admitted > 0.5
    assert ours.accuracy >= clean.accuracy - 0.05 and ours.attacker_admitted == 0.0


@pytest.mark.slow
def test_forged_tampered_and_replayed_batches_are_never_admitted(small):
    fleet, own = small
    for name in ("forgery", "tampering", "replay"):
        out = fleet.run(fleet.traffic(attack(name), 0.3), Contender("mean", "mean", DeltaSoupConfig.paper(seed=0)))
        assert (out.forged_admitted, out.tampered_admitted, out.replayed_admitted) == (0, 0, 0)
