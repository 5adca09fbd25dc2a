"""A LangChain retriever over dsonet's lessons (`pip install 'dsonet[langchain]'`).

    from dsonet.integrations.langchain import DsonetRetriever
    from dsonet.memory import open_memory

    retriever = DsonetRetriever(memory=open_memory(db="~/.dsonet/library.sqlite"))  # or node="http://..."
    docs = retriever.invoke("The ratio of boys to girls is 3:5 ...")

Each lesson (a `dsonet.library.Hit`) is a Document; its metadata carries its domain, score, scope and
fit, and the search's retrieval id, to report later with ``memory.outcome(retrieval_id, helped)``.
``environment`` (a `dsonet.scope.Scope`) is the asker's: lessons whose scope contradicts it are never returned.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from dsonet.library.policy import K


class DsonetRetriever(BaseRetriever):
    """The lessons a `dsonet.library.contract.Store` (a library file, a node, a `dsonet.memory`) holds for a query."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any  # a Store (pydantic cannot check a Protocol: any object)
    k: int = K
    min_similarity: float | None = None  # None: the threshold calibrated for the memory's space
    domain: str | None = None
    environment: Any = None  # a dsonet.scope.Scope: the asker's environment; None: none told

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = self.memory.search(query, k=self.k, min_similarity=self.min_similarity, domain=self.domain,
                                  environment=self.environment)
        return [Document(page_content=h.experience.text, id=h.experience.id,
                         metadata={"domain": h.experience.domain, "score": float(h.score), "retrieval_id": hits.retrieval_id,
                                   "scope": h.experience.scope.strings(), "fit": h.fit})
                for h in hits]
