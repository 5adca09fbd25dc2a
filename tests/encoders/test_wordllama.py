import numpy as np

from dsonet.encoders.wordllama import WordLlamaEncoder


def test_wordllama_makes_256_dim_unit_vectors_that_rank_related_text_first():
    enc = WordLlamaEncoder()
    v = enc.encode(["How many apples are left after eating some?", "She ate 3 of her 10 apples, so 7 are left.",
                    "The train leaves the station at noon."])
    assert enc.dim == 256 and v.shape == (3, 256) and enc.id == "wordllama:l2_supercat-256"
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2]
