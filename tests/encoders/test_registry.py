import numpy as np
import pytest

from dsonet.encoders import EncoderError
from dsonet.encoders.registry import encoder_from_config


def test_an_unknown_config_type_names_every_known_one():
    with pytest.raises(EncoderError, match="'nope' is unknown; expected sentence-transformers, hf, wordllama or zen"):
        encoder_from_config({"type": "nope"})


def test_a_zen_config_rebuilds_the_reranker_and_its_backbone(tmp_path, minilm):
    zen = pytest.importorskip("dsonet.encoders.zen")
    saved = zen.ZenReranker.for_backbone(minilm, seed=5)
    saved.save_pretrained(tmp_path)
    again = encoder_from_config({"type": "zen", "path": str(tmp_path)})
    texts = ["Divide the total by the number of friends."]
    assert again.id == saved.id
    np.testing.assert_array_equal(again.encode(texts), saved.encode(texts))
