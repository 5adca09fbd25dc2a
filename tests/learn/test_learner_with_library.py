"""The learner and retrieval against the real SQLite library with MiniLM embeddings."""

import pytest

from dsonet.learn.context import OWN_NOTES, Retrieval, inject
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.library import Library

from .test_grpo import LESSON, ScriptedLLM, _tasks


@pytest.fixture
def library(tmp_path, minilm):
    lib = Library(tmp_path / "lib.db", encoder=minilm)
    yield lib
    lib.close()


def test_learned_lessons_land_in_the_sqlite_library_once_with_provenance(library, tmp_path):
    learner = Learner(ScriptedLLM(), library, LearnConfig(group_size=4, epochs=2, batch_size=3), tmp_path / "run",
                      node_id="node-a")
    stats = learner.run(_tasks(), progress=False)
    exps = library.all()
    assert [e.text for e in exps] == [LESSON] and len(library) == 1
    assert exps[0].provenance.node_id == "node-a" and exps[0].provenance.model == "scripted"
    assert stats.operations["ADD"] == 1 and stats.operations["NONE"] >= 1


def test_similar_lessons_go_to_the_llm_with_short_ids_and_updates_replace_them(library, tmp_path):
    old = library.add("When a sum has negative terms, add them one at a time.", "math.doubling", 0.7)
    update = '[{"candidate": "C1", "op": "UPDATE", "id": "E1", "text": "When a sum has negative terms, add them one at a time, keeping signs."}]'
    llm = ScriptedLLM(op_reply=update)
    Learner(llm, library, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path / "run").run(_tasks(), False)
    texts = [e.text for e in library.all()]
    assert texts == ["When a sum has negative terms, add them one at a time, keeping signs."]
    assert library.get(old.id) is None
    assert any("E1: When a sum has negative terms, add them one at a time." in c for c in llm.calls)


def test_injection_puts_retrieved_lessons_in_the_system_message_and_nothing_below_the_threshold(library):
    library.add(LESSON, "math.arithmetic", 0.9)
    injection = inject(library, "When a sum has negative terms, how do I add?", "PROBLEM", Retrieval(min_similarity=0.3))
    assert len(injection.hits) == 1 and injection.chat[1]["content"] == "PROBLEM"
    assert injection.chat[0]["content"].endswith(f"{OWN_NOTES}\n- {LESSON}")
    injection = inject(library, "Name the capital of France.", "PROBLEM", Retrieval(min_similarity=0.6))
    assert injection.hits == [] and OWN_NOTES not in injection.chat[0]["content"]


def test_outcomes_recorded_on_the_library_feed_its_counters(library):
    from dsonet.library.contract import record_on_members

    exp = library.add(LESSON, "math.arithmetic", 0.9)
    hits = library.search(LESSON, min_similarity=0.5)
    assert record_on_members(library, hits, True) == 1 and record_on_members(library, hits, False) == 1
    assert library.outcomes(exp.id) == (2, 1)
