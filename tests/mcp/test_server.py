"""`dso mcp` end to end through the official SDK's own client: in process, over streamable HTTP
with a token, and over stdio as a desktop host launches it."""

import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from dsonet.bench.proxy import Served  # noqa: E402
from dsonet.experience import Provenance  # noqa: E402
from dsonet.library import Library  # noqa: E402
from dsonet.mcp.server import build_server, http_app, warm_up  # noqa: E402
from dsonet.memory import LocalMemory  # noqa: E402
from dsonet.scope import Scope  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402

LESSON = "When a ratio is given, write both parts as multiples of one unknown"


@pytest.fixture
def memory(tmp_path):
    mem = LocalMemory(Library(tmp_path / "lib.sqlite", encoder=HashEncoder()))
    yield mem
    mem.close()


def test_search_add_outcome_and_stats_through_the_sdk_client(memory):
    async def session():
        async with Client(build_server(memory)) as c:
            assert {t.name for t in (await c.list_tools()).tools} == {"search", "add", "learn_from_episode", "list",
                                                                   "record_outcome", "stats"}
            added = await c.call_tool("add", {"text": LESSON, "domain": "math.ratio", "confidence": 0.8})
            assert not added.is_error
            found = await c.call_tool("search", {"query": LESSON, "min_similarity": 0.5})
            outcome = await c.call_tool("record_outcome", {"retrieval_id": found.structured_content["retrieval_id"],
                                                           "helped": True})
            again = await c.call_tool("record_outcome", {"retrieval_id": found.structured_content["retrieval_id"],
                                                         "helped": False})
            stats = await c.call_tool("stats", {})
            return added.structured_content, found.structured_content, outcome, again, stats

    added, found, outcome, again, stats = anyio.run(session)
    assert added["id"] == found["hits"][0]["id"] and found["hits"][0]["score"] == pytest.approx(1.0, abs=1e-3)
    assert found["threshold"] == 0.5 and found["best_score"] == pytest.approx(1.0, abs=1e-3)
    assert found["lessons"].count(LESSON) == 1  # the rendered block carries the lesson's text
    assert outcome.structured_content["recorded"] == 1
    assert again.is_error and "already recorded" in again.content[0].text  # one vote per retrieval
    assert memory.library.outcomes(added["id"]) == (1, 1)
    assert '"experiences": 1' in stats.content[0].text


def test_a_search_with_nothing_above_the_threshold_returns_no_lessons(memory):
    memory.add(LESSON, "math.ratio")

    async def session():
        async with Client(build_server(memory)) as c:
            return (await c.call_tool("search", {"task": "How do I reverse a linked list?"})).structured_content

    found = anyio.run(session)
    assert found["hits"] == [] and found["lessons"] == ""
    assert found["retrieval_id"] is None  # nothing to report an outcome on
    assert found["best_score"] is not None and found["best_score"] < found["threshold"]  # how near it came


@pytest.mark.parametrize("tool,args,says", [
    ("add", {"text": " ".join(["word"] * 40)}, "40 words, the limit is 32"),
    ("add", {"text": LESSON, "domain": "Not A Domain!"}, "domain"),
    ("add", {"text": LESSON, "confidence": 2.0}, "confidence"),
    ("add", {"domain": "math"}, "text"),
    ("search", {"task": ""}, "task"),
    ("search", {"task": "x", "k": 0}, "k"),
    ("record_outcome", {"retrieval_id": "never-issued", "helped": True}, "already recorded"),
    ("record_outcome", {"retrieval_id": "abc"}, "helped"),
    ("add", {"text": LESSON, "scope": ["numpy>=2"]}, "is not name==version"),
])
def test_bad_arguments_are_a_clear_tool_error_and_store_nothing(memory, tool, args, says):
    async def call():
        async with Client(build_server(memory)) as c:
            return await c.call_tool(tool, args)

    result = anyio.run(call)
    assert result.is_error and says in result.content[0].text
    assert len(memory.library) == 0


@pytest.mark.parametrize("args,says", [
    ({"task": "x", "k": 0}, "search: k: input should be greater than or equal to 1 (got 0)"),
    ({"k": 3}, "search: query: field required"),
    ({"query": "When x, do y", "min_similarity": "high"}, "search: min_similarity: input should be a valid number"),
])
def test_an_argument_error_names_the_field_and_why_without_a_pydantic_url(memory, args, says):
    result, = _call(build_server(memory), ("search", args))
    text = result.content[0].text
    assert result.is_error and text.startswith(says)
    assert "pydantic" not in text and "http" not in text and "validation error for" not in text


def test_search_takes_query_like_every_other_entry_point_and_still_reads_task(memory):
    memory.add(LESSON, "math.ratio")
    by_query, by_task = _call(build_server(memory), ("search", {"query": LESSON, "min_similarity": 0.9}),
                              ("search", {"task": LESSON, "min_similarity": 0.9}))
    assert [h["text"] for h in by_query.structured_content["hits"]] == [LESSON]
    assert by_task.structured_content["hits"] == by_query.structured_content["hits"]


def test_add_and_search_take_tags_with_the_servers_scope_as_their_default(memory):
    server = build_server(memory, add_tags=("agent:reviewer",), search_tags=("agent:reviewer",))
    other = "When a list must stay sorted, insert with bisect instead of sorting again"
    mine, theirs, scoped, everyone = _call(
        server, ("add", {"text": LESSON}), ("add", {"text": other, "tags": ["agent:writer"]}),
        ("search", {"query": LESSON, "min_similarity": -1.0}),
        ("search", {"query": LESSON, "min_similarity": -1.0, "tags": []}))
    assert memory.library.tags(mine.structured_content["id"]) == ["agent:reviewer"]
    assert memory.library.tags(theirs.structured_content["id"]) == ["agent:writer"]
    assert [h["text"] for h in scoped.structured_content["hits"]] == [LESSON]
    assert {h["text"] for h in everyone.structured_content["hits"]} == {LESSON, other}


def test_add_takes_a_scope_and_search_an_environment_that_holds_contradicting_lessons_back(memory):
    server = build_server(memory, environment=Scope.parse(["numpy==1.26.4"]))
    added, held, told = _call(
        server, ("add", {"text": LESSON, "scope": ["numpy==2.4.6"]}),
        ("search", {"query": LESSON, "min_similarity": -1.0}),  # the server's environment by default
        ("search", {"query": LESSON, "min_similarity": -1.0, "environment": ["numpy==2.4.0"]}))
    assert memory.library.get(added.structured_content["id"]).scope == Scope.parse(["numpy==2.4.6"])
    assert held.structured_content["hits"] == []
    assert held.structured_content["held_back"][0]["reason"] == "numpy 2.4.6 learned, 1.26.4 here"
    (hit,) = told.structured_content["hits"]
    assert (hit["scope"], hit["fit"], told.structured_content["held_back"]) == (["numpy==2.4.6"], "fits", [])


def _call(server, *calls):
    """Each (tool, args) through the SDK's client, in one session; the results in order."""
    async def session():
        async with Client(server) as c:
            return [await c.call_tool(tool, args) for tool, args in calls]

    return anyio.run(session)


PEER = "ab" * 32  # a peer node's id: its lessons are listed, never deleted here


def test_list_pages_the_lessons_newest_first_with_their_authors(memory):
    for i in range(3):
        memory.add(f"When step {i} fails, retry it once", "ops")
        time.sleep(0.002)  # distinct creation times
    memory.library.add("When a peer says so, check it", "ops.peer", provenance=Provenance(PEER, "m", 1, 0))
    first, second, peer_only = _call(build_server(memory), ("list", {"limit": 2}), ("list", {"offset": 2, "limit": 2}),
                                     ("list", {"domain": "ops.peer"}))
    page1, page2 = first.structured_content, second.structured_content
    assert page1["total"] == 4 and page1["next_offset"] == 2 and page2["next_offset"] is None
    texts = [x["text"] for x in page1["lessons"] + page2["lessons"]]
    assert texts == [f"When step {i} fails, retry it once" for i in (2, 1, 0)] + ["When a peer says so, check it"]
    assert [x["own"] for x in page1["lessons"] + page2["lessons"]] == [True, True, True, False]
    assert peer_only.structured_content["lessons"][0]["author"] == PEER


def test_delete_is_opt_in_and_limited_to_this_nodes_own_lessons(memory):
    own = memory.add(LESSON, "math.ratio")
    peer = memory.library.add("When a peer says so, check it", "ops", provenance=Provenance(PEER, "m", 1, 0))
    assert "delete" not in anyio.run(_tool_names, build_server(memory))
    refused, unknown, done = _call(build_server(memory, allow_delete=True), ("delete", {"id": peer.id}),
                                   ("delete", {"id": "f" * 64}), ("delete", {"id": own.id}))
    assert refused.is_error and "written by node abababab" in refused.content[0].text
    assert unknown.is_error and "no such lesson" in unknown.content[0].text
    assert done.structured_content == {"id": own.id, "deleted": True}
    assert [e.id for e in memory.library.all()] == [peer.id]


async def _tool_names(server) -> set[str]:
    async with Client(server) as c:
        return {t.name for t in (await c.list_tools()).tools}


def test_warm_up_loads_the_encoder_before_the_first_tool_call(tmp_path, monkeypatch):
    path = tmp_path / "lazy.sqlite"
    Library(path, encoder=HashEncoder()).close()
    loads = []
    monkeypatch.setattr("dsonet.encoders.default_encoder", lambda: loads.append(1) or HashEncoder())
    memory = LocalMemory(Library(path))  # the default encoder loads when first asked for
    assert loads == []
    warm_up(memory)
    assert loads == [1]
    memory.close()


@pytest.fixture
def http_server(memory):
    with Served(http_app(build_server(memory), token="s3cret", max_body=64 * 1024)) as served:
        yield f"{served.url}/mcp"


def test_streamable_http_needs_the_token_and_limits_the_body(http_server, memory):
    async def session():
        http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret"})
        async with http, Client(streamable_http_client(http_server, http_client=http)) as c:
            await c.call_tool("add", {"text": LESSON, "domain": "math.ratio"})
            return (await c.call_tool("search", {"task": LESSON})).structured_content

    assert anyio.run(session)["hits"][0]["text"] == LESSON
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert httpx.post(http_server, json=hello).status_code == 401
    assert httpx.post(http_server, json=hello, headers={"Authorization": "Bearer nope"}).status_code == 401
    big = httpx.post(http_server, content=b"x" * (65 * 1024), headers={"Authorization": "Bearer s3cret",
                                                                       "content-type": "application/json"})
    assert big.status_code == 413
    assert len(memory.library) == 1


@pytest.mark.slow
def test_dso_mcp_over_stdio_as_a_desktop_host_launches_it(tmp_path):
    """The command a Claude Desktop / Cursor config runs, with a real encoder (WordLlama: no torch)."""
    import dsonet

    params = StdioServerParameters(command=sys.executable, args=["-m", "dsonet.cli.main", "mcp", "--db",
                                                                 str(tmp_path / "lib.sqlite"), "--encoder", "wordllama"],
                                   env={"PYTHONPATH": str(Path(dsonet.__file__).parents[1])})  # this dsonet

    async def session():
        async with Client(params, read_timeout_seconds=120) as c:
            await c.call_tool("add", {"text": LESSON, "domain": "math.ratio"})
            await c.call_tool("add", {"text": "When a graph is sparse, store it as adjacency lists", "domain": "code"})
            found = await c.call_tool("search", {"task": "The ratio of boys to girls is 3:5 and there are 40 pupils. "
                                                         "How many girls?", "min_similarity": 0.1, "k": 1})
            bad = await c.call_tool("add", {"text": LESSON, "domain": "UPPER"})
            return found.structured_content, bad

    found, bad = anyio.run(session)
    assert [h["text"] for h in found["hits"]] == [LESSON]
    assert bad.is_error and "domain" in bad.content[0].text


def test_an_episode_of_the_agents_own_work_becomes_a_lesson_on_probation_or_says_why_not(memory):
    task = "Write one line of Python that assigns to r the integral of y over x by the trapezoidal rule."
    refused = "AttributeError: module 'numpy' has no attribute 'trapz'"

    async def session():
        async with Client(build_server(memory)) as c:
            learned = await c.call_tool("learn_from_episode", {"task": task, "failed_code": "r = np.trapz(y, x)",
                                                               "error": refused, "fixed_code": "r = np.trapezoid(y, x)"})
            nothing = await c.call_tool("learn_from_episode", {"task": task, "failed_code": "r = sum(y)",
                                                               "error": "ValueError: wrong", "fixed_code": "r = 1"})
            again = await c.call_tool("learn_from_episode", {"task": task, "failed_code": "r = np.trapz(y, x)",
                                                             "error": refused, "fixed_code": "r = np.trapezoid(y, x)"})
            return learned.structured_content, nothing.structured_content, again.structured_content

    learned, nothing, again = anyio.run(session)
    assert learned["learned"] and "use np.trapezoid" in learned["text"] and "not np.trapz" in learned["text"]
    # its evidence, published with it: a second episode of the same lesson from this server's one host
    assert (learned["episodes"], learned["agents"]) == (1, 1)
    assert again["id"] == learned["id"] and (again["episodes"], again["agents"]) == (2, 1)
    assert (memory.library.all()[0].provenance.episodes, memory.library.all()[0].provenance.agents) == (2, 1)
    (row,) = memory.library.all()
    assert row.id == learned["id"] and row.domain == "code" and row.confidence == pytest.approx(0.3)
    assert not nothing["learned"] and "names nothing" in nothing["reason"] and len(memory.library.all()) == 1
