"""`dso bench llm`: its workload is the demo's prompts, and its verdict names the bound that holds."""

from dsonet.bench.llm import verdict, workload
from dsonet.learn import drift


def _row(k: int, ours: float, theirs: float) -> dict:
    return {"model": "m", "batch": k, "n_prompts": 8, "identical_to_sequential": 8,
            "dsonet": {"answers_per_s": ours}, "llama_cpp_batched": {"answers_per_s": theirs}}


def test_the_workload_mixes_facts_and_asks_as_the_demo_does():
    chats = workload(len(drift.FACTS) + 3)
    assert len(chats) == len(drift.FACTS) + 3
    assert all(c[-1]["role"] == "user" and c[-1]["content"].endswith(drift.INSTRUCTION) for c in chats)
    assert len({c[-1]["content"] for c in chats}) == len(chats)


def test_the_verdict_holds_us_to_llama_cpps_figure_when_three_times_one_sequence_is_above_it():
    v = verdict([_row(1, 1.0, 0.9), _row(8, 1.3, 1.4)])
    assert v["bound"] == "within 20% of llama.cpp's batched figure" and v["target"] == 1.12 and v["met"]
    v = verdict([_row(1, 1.0, 0.9), _row(8, 2.5, 4.0)])
    assert v["bound"] == "3x one sequence" and v["target"] == 3.0 and not v["met"] and v["best_batch"] == 8
