"""An adapter so the `mteb` package can evaluate any dsonet encoder (the paper reports MTEB 68.4).

mteb calls ``model.encode(sentences, **kwargs)`` with ``prompt_type`` set to query or
document/passage for retrieval tasks; `MtebEncoder` maps that to our ``kind``. mteb itself is
not a dependency (it brings pandas, pyarrow, polars and `datasets`, and its tasks download
from the Hugging Face hub); `retrieval_scores` computes the retrieval task's main scores
(nDCG@10, recall@10) the way mteb defines them, for offline tasks built from packaged data.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dsonet.encoders.base import Encoder, Kind


class MtebEncoder:
    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.model_name = encoder.id  # mteb names result folders after this

    @staticmethod
    def kind_of(prompt_type: Any) -> Kind:
        value = getattr(prompt_type, "value", prompt_type)  # mteb's PromptType enum or a plain string
        return "query" if value == "query" else "document"

    def encode(self, sentences: Sequence[str] | Any, prompt_type: Any = None, **kwargs) -> np.ndarray:
        """mteb's interface: a list of texts (or mteb 2's DataLoader of {"text": [...]} batches)."""
        if not isinstance(sentences, (list, tuple)):
            sentences = [text for batch in sentences for text in batch["text"]]
        return self.encoder.encode(list(sentences), kind=self.kind_of(prompt_type))


def retrieval_scores(model: MtebEncoder, queries: dict[str, str], corpus: dict[str, str],
                     relevant: dict[str, set[str]], k: int = 10) -> dict[str, float]:
    """nDCG@k and recall@k of ``model`` on a retrieval task (binary relevance, as mteb scores it)."""
    qids, dids = list(queries), list(corpus)
    q = model.encode([queries[i] for i in qids], prompt_type="query")  # (Q, d)
    d = model.encode([corpus[i] for i in dids], prompt_type="document")  # (D, d)
    top = np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :k]  # (Q, k)
    hit = np.array([[dids[j] in relevant[qid] for j in row] for qid, row in zip(qids, top)], dtype=float)
    discounts = 1 / np.log2(np.arange(2, k + 2))
    ideal = np.array([discounts[: min(len(relevant[qid]), k)].sum() for qid in qids])
    n_rel = np.array([len(relevant[qid]) for qid in qids])
    return {f"ndcg_at_{k}": float(((hit * discounts).sum(1) / ideal).mean()),
            f"recall_at_{k}": float((hit.sum(1) / np.minimum(n_rel, k)).mean())}
