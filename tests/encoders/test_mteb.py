"""MtebEncoder on a small offline retrieval task built from packaged GSM8K."""

import numpy as np

from dsonet.encoders.mteb import MtebEncoder, retrieval_scores
from dsonet.encoders.sentence import SentenceTransformerEncoder


class _PromptType:  # stands in for mteb's PromptType enum (mteb is not installed)
    value = "query"


def _task(n=60):
    from dsonet.data import gsm8k

    items = gsm8k()[-n:]
    queries = {f"q{i}": it.question for i, it in enumerate(items)}
    corpus = {f"d{i}": it.solution for i, it in enumerate(items)}
    return queries, corpus, {f"q{i}": {f"d{i}"} for i in range(n)}


def test_minilm_scores_well_on_a_gsm8k_retrieval_task(minilm):
    scores = retrieval_scores(MtebEncoder(minilm), *_task())
    assert 0.8 < scores["ndcg_at_10"] <= 1.0 and scores["recall_at_10"] >= scores["ndcg_at_10"]


def test_shuffled_relevance_scores_near_chance(minilm):
    queries, corpus, _ = _task()
    wrong = {f"q{i}": {f"d{(i + 7) % 60}"} for i in range(60)}
    assert retrieval_scores(MtebEncoder(minilm), queries, corpus, wrong)["recall_at_10"] < 0.4


def test_prompt_type_query_uses_the_encoders_query_side():
    enc = MtebEncoder(SentenceTransformerEncoder("minilm", query_prefix="query: "))
    texts = ["How many eggs are left?"]
    as_query, as_doc = enc.encode(texts, prompt_type=_PromptType()), enc.encode(texts, prompt_type="document")
    assert not np.allclose(as_query, as_doc)
    np.testing.assert_allclose(enc.encode([{"text": texts}].__iter__()), as_doc, atol=1e-6)
