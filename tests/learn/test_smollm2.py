"""The embedded SmolLM2 for real: a couple of short batched generations."""

import pytest

from dsonet.learn.chat import ChatLLM, user


@pytest.fixture(scope="module")
def smollm2():
    from dsonet.learn.local_llm import smollm2

    return smollm2()


@pytest.mark.slow
def test_smollm2_batches_n_samples_per_prompt_and_repeats_under_a_seed(smollm2):
    assert isinstance(smollm2, ChatLLM) and smollm2.name == "SmolLM2-135M-Instruct"
    chats = [user("What is 2 + 3?"), user("Name a colour.")]
    out = smollm2.generate(chats, n=2, temperature=0.7, max_tokens=8, seed=7)
    assert len(out) == 2 and all(len(c.texts) == 2 for c in out)
    assert all(0 < c.completion_tokens <= 16 and c.prompt_tokens > 5 for c in out)
    assert [c.texts for c in smollm2.generate(chats, n=2, temperature=0.7, max_tokens=8, seed=7)] == \
        [c.texts for c in out]
    greedy = smollm2.generate([user("What is 2 + 3?")], n=1, temperature=0, max_tokens=8)[0]
    assert greedy.texts[0] and greedy.completion_tokens <= 8
