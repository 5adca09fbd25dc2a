import pytest

from dsonet.encoders import EncoderError
from dsonet.encoders.backbones import backbone_from_config, encoder_config


def test_a_zen_reranker_as_a_backbone_is_sent_to_the_registry():
    with pytest.raises(EncoderError, match=r"'zen' is unknown.*registry\.encoder_from_config"):
        backbone_from_config({"type": "zen", "path": "somewhere"})


def test_an_encoder_without_a_config_cannot_be_saved_by_name():
    class Bare:
        id, dim = "bare", 3

    with pytest.raises(EncoderError, match="'bare' .*has no config"):
        encoder_config(Bare())
