import json

import numpy as np
import pytest

from dsonet.encoders.default import default_head_dir
from dsonet.train.config import cpu_recipe


@pytest.mark.slow
def test_default_encoder_is_minilm_plus_a_cached_zen_head(default_encoder):
    assert default_encoder.dim == 7680
    assert default_encoder.id == f"st:all-MiniLM-L6-v2+zen7680:{cpu_recipe().recipe_hash()}"
    v = default_encoder.encode(["When a rate is given per hour, multiply by the hours.", "Divide the total by 4."])
    assert v.shape == (2, 7680)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    metrics = json.loads((default_head_dir() / "metrics.json").read_text())
    assert metrics["stage1"]["after"]["cosine_to_padded"] > 0.9
    assert metrics["stage3"]["after"]["recall_at_10"] > 0.95  # held-out GSM8K question -> own solution


@pytest.mark.slow
def test_default_encoder_keeps_related_texts_closer(default_encoder):
    a, b, c = default_encoder.encode(["How many apples are left after eating three?",
                                      "She had 10 apples and ate 3, so 7 are left.",
                                      "The train leaves the station at noon."])
    assert a @ b > a @ c + 0.1
