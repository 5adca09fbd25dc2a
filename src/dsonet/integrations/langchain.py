"""A LangChain retriever over dsonet's lessons (`pip install 'dsonet[langchain]'`).

    from dsonet.integrations.langchain import DsonetRetriever
    from dsonet.memory import open_memory

    retriever = DsonetRetriever(memory=open_memory(db="~/.dsonet/library.sqlite"))  # or node="http://..."
    docs = retriever.invoke("The ratio of boys to girls is 3:5 ...")

Each lesson is a Document; its metadata carries the lesson's id, domain and score, and the
search's retrieval id, to report later with ``memory.outcome(retrieval_id, helped)``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from dsonet.library.policy import K


class DsonetRetriever(BaseRetriever):
    """The lessons a `dsonet.memory.Memory` (a library file or a node) holds for a query."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any  # a dsonet.memory.Memory
    k: int = K
    min_similarity: float | None = None  # None: the threshold calibrated for the memory's space
    domain: str | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        recall = self.memory.search(query, k=self.k, min_similarity=self.min_similarity, domain=self.domain)
        return [Document(page_content=lesson.text, id=lesson.id,
                         metadata={"domain": lesson.domain, "score": lesson.score, "retrieval_id": recall.retrieval_id})
                for lesson in recall.lessons]
