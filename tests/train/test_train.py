import json

import pytest
import torch

from dsonet.encoders.zen import ZenReranker
from dsonet.train import TrainConfig, TrainError, train
from dsonet.train.config import cpu_recipe
from dsonet.train.data import build_data

TINY = TrainConfig(limit_items=60, s1_steps=8, s1_batch=16, s1_warmup=2, s2_steps=4, s2_batch=8, s2_lr=1e-4,
                   s2_mine_every=2, s3_steps=3, s3_batch=8, s3_lr=1e-4, s3_copies=3, s3_code_queries=4, s3_code_pool=16,
                   checkpoint_every=3)


@pytest.fixture(scope="module")
def tiny_data(minilm, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.npz"
    build_data(TINY, encoder=minilm).save(path)
    return path


def _run(out, data_path, minilm, **kwargs):
    out.mkdir(exist_ok=True)
    (out / "data.npz").write_bytes(data_path.read_bytes())
    return train(TINY, out, encoder=minilm, log=lambda _msg: None, **kwargs)


def test_training_writes_a_loadable_reranker_and_every_stage_metric(tmp_path, tiny_data, minilm):
    result = _run(tmp_path, tiny_data, minilm)
    assert result.finished
    m = json.loads((tmp_path / "metrics.json").read_text())
    code = {"code_recall_at_10", "code_cosine", "code_delta_cosine"}  # every stage: what it does to the codes
    assert {"cosine_to_padded"} | code == set(m["stage1"]["after"])
    assert all(code <= set(m[stage]["after"]) for stage in ("stage2", "stage3"))
    assert m["stage3"]["after"]["code_delta_cosine"] > 0.7
    assert m["stage1"]["after"]["cosine_to_padded"] > m["stage1"]["before"]["cosine_to_padded"]
    assert 0 <= m["stage2"]["after"]["recall_at_10"] <= 1
    assert m["stage3"]["after"]["bitdelta_bytes"] == 964
    enc = ZenReranker.from_pretrained(tmp_path, backbone=minilm)
    assert enc.dim == 7680 and enc.id.endswith(result.head.digest()[:12])
    v = enc.encode(["When the total is asked, add the parts."])
    assert v.shape == (1, 7680)
    torch.testing.assert_close(torch.from_numpy(v), torch.from_numpy(result.head.project(minilm.encode(
        ["When the total is asked, add the parts."]))))


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, tiny_data, minilm):
    whole = _run(tmp_path / "whole", tiny_data, minilm)
    first = _run(tmp_path / "parts", tiny_data, minilm, max_steps=10)  # stops inside stage 2
    assert not first.finished
    resumed = _run(tmp_path / "parts", tiny_data, minilm)
    assert resumed.finished
    for name, weight in whole.head.state_dict().items():
        torch.testing.assert_close(resumed.head.state_dict()[name], weight)


def test_resuming_with_a_different_config_is_refused(tmp_path, tiny_data, minilm):
    _run(tmp_path, tiny_data, minilm, max_steps=2)
    with pytest.raises(TrainError, match="different config"):
        train(TrainConfig(limit_items=60, seed=1), tmp_path, encoder=minilm, log=lambda _msg: None)


def test_recipe_hash_ignores_checkpoint_frequency_but_not_hyper_parameters():
    base = cpu_recipe()
    assert base.with_overrides(checkpoint_every=7).recipe_hash() == base.recipe_hash()
    assert base.with_overrides(s2_lr=2e-4).recipe_hash() != base.recipe_hash()
    with pytest.raises(ValueError, match="unknown"):
        base.with_overrides(learning_rate=1.0)
