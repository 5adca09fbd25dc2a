"""`dso bench learn --pilot --probe`: the learner's proposals measured alone beside neutral text, driven by
a scripted LLM (the subject is the probe's bookkeeping; the real runs are in bench/results/learn-probe-*.json)."""

import re

from dsonet.bench.learn_pilot import probe
from dsonet.learn.chat import Completion

RULE = "When a girl's brother is asked about his sisters, count the girl herself too."


class SiblingsLLM:
    """Answers aiw items right in odd-numbered samples (greedy: wrong), always right with RULE in its
    system message; as the reflector, writes RULE and one fact about a named girl."""

    name = "siblings"

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = []
        for chat in chats:
            text = chat[-1]["content"]
            if text.startswith("Several attempts"):
                girl = re.search(r"Problem: (\w+)", text).group(1)
                texts = (f"{RULE}\nWhen {girl} has sisters, her brother has one more.",) * n
            else:
                sisters = int(re.search(r"(\d+) sisters", text).group(1))
                right = f"Answer: {sisters + 1}"
                ruled = RULE in chat[0]["content"]
                texts = tuple(right if ruled or i % 2 else "Answer: 0" for i in range(n))
            out.append(Completion(texts, 10, 5 * n))
        return out


def test_the_probe_measures_each_proposal_alone_and_says_why_the_others_were_refused():
    row = probe(SiblingsLLM(), "aiw", n=6, tokens=16, practice=4, log=lambda _: None)
    assert row["mixed_groups"] == row["groups"] == 4 and row["practice_accuracy"] == 0.5
    assert row["proposals"] == [{"text": RULE, "accuracy": 1.0, "accuracy_neutral": 0.0}]
    assert row["best_accuracy"] == 1.0
    assert len(row["refused"]) == 4 and all("names the problem's" in r for r in row["refused"])


def test_the_probe_and_a_served_reflector_need_their_companion_options():
    from click.testing import CliRunner

    from dsonet.bench.learn import cli

    probe_alone = CliRunner().invoke(cli, ["--probe", "16", "--family", "aiw"])
    assert probe_alone.exit_code == 2 and "give --pilot N too" in probe_alone.output
    url_alone = CliRunner().invoke(cli, ["--pilot", "30", "--reflector-llm", "http://127.0.0.1:9/v1"])
    assert url_alone.exit_code == 2 and "give --reflector too" in url_alone.output
