import pytest

from dsonet.train.default import held_out_texts, reproduce


@pytest.mark.slow
@pytest.mark.recipe
@pytest.mark.timeout(1800)  # the whole CPU recipe: ~6-8 minutes on 2 idle cores, 28 on a loaded one
def test_dso_train_default_rebuilds_a_head_whose_neighbours_agree_with_the_shipped_one(tmp_path):
    report = reproduce(tmp_path, log=lambda _msg: None)
    assert report["top10_overlap"] >= 0.9  # the same space, whatever this machine's floats
    assert report["baseline_cosine"] > 0.99
    assert {"config.json", "model.safetensors", "baseline.safetensors", "metrics.json"} <= {p.name for p in tmp_path.iterdir()}


def test_held_out_texts_are_texts_of_items_training_never_saw():
    from dsonet.data import gsm8k
    from dsonet.train.config import cpu_recipe
    from dsonet.train.data import split_indices

    texts = held_out_texts()
    train, _ = split_indices(len(gsm8k()), cpu_recipe().held_out, cpu_recipe().seed)
    assert len(texts) > 1000
    assert not {gsm8k()[i].question for i in train} & set(texts)
