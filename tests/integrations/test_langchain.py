"""The LangChain retriever against the real langchain-core: documents, metadata, and a chain."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")
from langchain_core.runnables import RunnableLambda  # noqa: E402

from dsonet.experience import experience_id  # noqa: E402
from dsonet.integrations.langchain import DsonetRetriever  # noqa: E402
from dsonet.library import Library  # noqa: E402
from dsonet.memory import LocalMemory  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402

LESSON = "When a ratio is given, write both parts as multiples of one unknown"


@pytest.fixture
def memory(tmp_path):
    mem = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    mem.add(LESSON, "math.ratio")
    mem.add("When a graph is sparse, store it as adjacency lists", "code")
    yield mem
    mem.close()


def test_lessons_come_back_as_documents_whose_retrieval_id_records_an_outcome(memory):
    docs = DsonetRetriever(memory=memory, k=3).invoke(LESSON)
    assert [d.page_content for d in docs] == [LESSON]
    assert docs[0].id == experience_id(LESSON, "math.ratio")
    assert docs[0].metadata["domain"] == "math.ratio" and docs[0].metadata["score"] == pytest.approx(1.0, abs=1e-3)
    assert memory.outcome(docs[0].metadata["retrieval_id"], helped=True) == 1


def test_the_retriever_composes_in_a_chain(memory):
    chain = DsonetRetriever(memory=memory) | RunnableLambda(lambda docs: "\n".join(f"- {d.page_content}" for d in docs))
    assert chain.invoke(LESSON) == f"- {LESSON}"
    assert DsonetRetriever(memory=memory).invoke("How do I reverse a linked list?") == []


def test_the_retriever_searches_in_the_askers_environment(memory):
    from dsonet.scope import Scope

    new = "When integrating samples, use np.trapezoid(z, x), not np.trapz"
    memory.add(new, "code", scope=Scope.parse(["numpy==2.4.6"]))
    fits = DsonetRetriever(memory=memory, environment=Scope.parse(["numpy==2.4.0"])).invoke(new)
    assert [(d.page_content, d.metadata["scope"], d.metadata["fit"]) for d in fits] == [(new, ["numpy==2.4.6"], "fits")]
    assert DsonetRetriever(memory=memory, environment=Scope.parse(["numpy==1.26.4"])).invoke(new) == []
