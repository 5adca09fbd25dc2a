"""One contract, every store: a library file, the memory over it, and a running node's HTTP API
(its client, and the memory over that) answer the same calls the same way
(`dsonet.library.contract.Store`)."""

import inspect
from dataclasses import dataclass
from typing import Callable

import pytest

from dsonet.errors import DsoError
from dsonet.library import Hit, Hits, Library
from dsonet.library.contract import Store
from dsonet.memory import LocalMemory
from dsonet.network.client import NodeClient
from node_server import serving
from lib_helpers import HashEncoder
from dsonet.scope import Scope

LESSON = "When a ratio is given, write both parts as multiples of one unknown"
OTHER = "When a list must stay sorted, insert with bisect instead of sorting again"
EXACT = 0.99  # the test encoder gives a text itself at cosine 1 and any other text about 0
STORE_CALLS = ("add", "search", "outcome", "add_evidence", "delete", "all", "stats", "close")


@dataclass
class Case:
    store: Store
    outcomes: Callable[[str], tuple[int, int]]  # an experience's (uses, helped), read from the file behind the store
    held: Callable[[dict], int]  # the experiences a stats() answer counts


def _file_held(stats: dict) -> int:
    return stats["experiences"]


@pytest.fixture
def node(tmp_path):
    """A node (test encoder, in-process log) serving its API on a uvicorn thread."""
    with serving(tmp_path / "node", token="t", encoder=HashEncoder(), rule="mean") as served:
        yield served


@pytest.fixture(params=["library", "local-memory", "node-client"])
def case(request, tmp_path):
    if request.param.startswith("node"):
        url, node = request.getfixturevalue("node")
        client = NodeClient(url, token="t")
        yield Case(client, node.library.outcomes, lambda stats: stats["library"]["experiences"])
        client.close()
        return
    lib = Library(tmp_path / "lib.sqlite", encoder=HashEncoder())
    yield Case(lib if request.param == "library" else LocalMemory(lib), lib.outcomes, _file_held)
    lib.close()


@pytest.mark.parametrize("name", STORE_CALLS)
def test_every_store_takes_the_contracts_arguments(name):
    expected = list(inspect.signature(getattr(Store, name)).parameters)[1:]
    for kind in (Library, LocalMemory, NodeClient):
        assert list(inspect.signature(getattr(kind, name)).parameters)[1:len(expected) + 1] == expected, kind


def test_a_lesson_added_is_found_first_with_a_retrieval_id_and_shown_in_one_json_shape(case):
    exp = case.store.add(LESSON, domain="math.ratios", confidence=0.7)
    case.store.add(OTHER, domain="code")
    hits = case.store.search(LESSON, min_similarity=EXACT)
    assert isinstance(hits, Hits) and [h.experience.id for h in hits] == [exp.id]
    assert hits.threshold == EXACT and hits.best_score == pytest.approx(1.0, abs=1e-3)
    assert isinstance(hits.retrieval_id, str) and hits.retrieval_id
    (hit,) = hits
    assert isinstance(hit, Hit) and hit.members == (exp.id,)
    shown = hit.summary()
    assert {name: type(value) for name, value in shown.items()} == Hit.SUMMARY
    sent = hit.to_json()  # one shape: what an agent reads is part of what the API and the CLI send
    assert shown.items() <= sent.items() and Hit.from_json(sent).to_json() == sent
    assert (sent["members"], sent["confidence"]) == ([exp.id], 0.7)
    assert (shown["id"], shown["text"], shown["domain"]) == (exp.id, LESSON, "math.ratios")
    assert [h.experience.id for h in case.store.search(LESSON, min_similarity=EXACT, domain="code")] == []


def test_a_search_that_finds_nothing_issues_no_retrieval_id_and_says_how_near_it_came(case):
    case.store.add(OTHER, domain="code")
    hits = case.store.search(LESSON, min_similarity=EXACT)
    assert hits == [] and hits.retrieval_id is None
    assert hits.threshold == EXACT and hits.best_score is not None and hits.best_score < EXACT


def test_an_outcome_counts_once_on_the_lessons_of_its_retrieval(case):
    exp = case.store.add(LESSON)
    rid = case.store.search(LESSON, min_similarity=EXACT).retrieval_id
    assert case.store.outcome(rid, helped=True) == 1
    assert case.outcomes(exp.id) == (1, 1)
    with pytest.raises(DsoError):  # once per retrieval
        case.store.outcome(rid, helped=True)
    with pytest.raises(DsoError):
        case.store.outcome("never-issued", helped=False)
    assert case.outcomes(exp.id) == (1, 1)


def test_per_lesson_verdicts_judge_only_the_named_lessons_and_a_stray_one_is_refused(case):
    exp = case.store.add(LESSON)
    rid = case.store.search(LESSON, min_similarity=EXACT).retrieval_id
    with pytest.raises(DsoError):  # a lesson this retrieval did not give: refused, the retrieval kept
        case.store.outcome(rid, lessons={"0" * 64: False})
    with pytest.raises(DsoError):  # neither helped nor lessons
        case.store.outcome(rid)
    assert case.outcomes(exp.id) == (0, 0)
    assert case.store.outcome(rid, lessons={exp.id: False}) == 1
    assert case.outcomes(exp.id) == (1, 0)


def test_a_lessons_evidence_grows_in_every_store_and_its_hits_carry_it(case):
    exp = case.store.add(LESSON, domain="code", confidence=0.3)
    assert case.store.add_evidence(exp.id, 1, 1).provenance.agents == 1
    grown = case.store.add_evidence(exp.id)  # one more episode, of the same agent
    assert (grown.id, grown.provenance.episodes, grown.provenance.agents) == (exp.id, 2, 1)
    (hit,) = case.store.search(LESSON, min_similarity=EXACT)
    assert {k: hit.to_json()["provenance"][k] for k in ("episodes", "agents")} == {"episodes": 2, "agents": 1}
    with pytest.raises(DsoError, match="agents"):
        case.store.add_evidence(exp.id, 1, 2)
    assert case.store.add_evidence("0" * 64) is None
    assert [(e.provenance.episodes, e.provenance.agents) for e in case.store.all()] == [(2, 1)]


def test_a_deleted_lesson_is_gone_from_search_listing_and_stats(case):
    kept, gone = case.store.add(OTHER), case.store.add(LESSON)
    assert case.held(case.store.stats()) == 2 and {e.id for e in case.store.all()} == {kept.id, gone.id}
    assert case.store.delete(gone.id) is True
    assert case.store.delete(gone.id) is False
    assert case.store.search(LESSON, min_similarity=EXACT) == []
    assert [e.id for e in case.store.all()] == [kept.id] and case.held(case.store.stats()) == 1


@pytest.mark.parametrize("text", ["x", "ok"])
def test_a_text_with_no_words_to_act_on_is_refused_by_every_store_and_nothing_is_stored(case, text):
    with pytest.raises(DsoError, match="a lesson needs at least 3"):
        case.store.add(text)
    assert case.store.all() == []


def test_tags_scope_a_search_to_the_lessons_that_carry_them_all_in_every_store(case):
    mine = case.store.add(LESSON, domain="math", tags=("agent:reviewer", "project:billing"))
    theirs = case.store.add(OTHER, domain="code", tags=("agent:writer",))

    def found(*tags):
        return sorted(h.experience.id for h in case.store.search(LESSON, min_similarity=-1.0, k=10, tags=tags))

    assert found() == sorted([mine.id, theirs.id])
    assert found("project:billing") == [mine.id] and found("agent:reviewer", "project:billing") == [mine.id]
    assert found("agent:writer") == [theirs.id] and found("agent:writer", "project:billing") == []
    with pytest.raises(DsoError, match="tags: 'Not A Tag' is not a tag like 'agent:reviewer'"):
        case.store.add("When a tag is wrong, say which one", tags=("Not A Tag",))
    assert len(case.store.all()) == 2


def test_a_lesson_keeps_its_scope_and_a_search_in_another_environment_holds_it_back_saying_why(case):
    scope = Scope.parse(["numpy==2.4.6"])
    exp = case.store.add(LESSON, domain="code", scope=scope)
    assert exp.scope == scope
    hits = case.store.search(LESSON, min_similarity=EXACT, environment=Scope.parse(["numpy==2.4.0"]))
    assert [(h.experience.id, h.experience.scope, h.fit) for h in hits] == [(exp.id, scope, "fits")]
    hits = case.store.search(LESSON, min_similarity=EXACT, environment=Scope.parse(["numpy==1.26.4"]))
    assert list(hits) == [] and [(b.id, b.reason) for b in hits.held_back] == [(exp.id, "numpy 2.4.6 learned, 1.26.4 here")]


def test_an_outcome_may_say_where_the_lessons_were_used(case):
    exp = case.store.add(LESSON, domain="code", scope=Scope.parse(["numpy==2.4.6"]))
    hits = case.store.search(LESSON, min_similarity=EXACT)  # searched without an environment
    assert case.store.outcome(hits.retrieval_id, helped=False, environment=Scope.parse(["numpy==1.26.4"])) == 1
    assert case.outcomes(exp.id) == (1, 0)
