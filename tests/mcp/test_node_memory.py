"""`dso mcp --node URL` and `dso proxy --node URL`: the tools and the proxy over a running node's
HTTP API, where the node issues the retrieval ids and records the outcomes itself."""

import sys
from pathlib import Path

import anyio
import httpx
import openai
import pytest

from dsonet.bench.proxy import Served, scripted_upstream
from dsonet.memory import open_memory
from dsonet.proxy.app import create_app as create_proxy
from node_server import serving

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402

LESSON = "When a ratio is given, write both parts as multiples of one unknown"


@pytest.fixture
def node(tmp_path):
    """A node (test encoder, in-process log) serving its API with a token on a uvicorn thread."""
    with serving(tmp_path / "node", token="node-token", encoder=HashEncoder(), rule="mean") as served:
        yield served


def _counters(node) -> tuple[int, int]:
    """(uses, helped) summed over every lesson the node holds."""
    counts = [node.library.outcomes(e.id) for e in node.library.all()]
    return sum(u for u, _ in counts), sum(h for _, h in counts)


def test_mcp_tools_over_a_node(node):
    from mcp import Client

    from dsonet.mcp.server import build_server

    url, n = node
    memory = open_memory(node=url, token="node-token")

    async def session():
        async with Client(build_server(memory)) as c:
            await c.call_tool("add", {"text": LESSON, "domain": "math.ratio"})
            found = (await c.call_tool("search", {"task": LESSON})).structured_content
            done = await c.call_tool("record_outcome", {"retrieval_id": found["retrieval_id"], "helped": True})
            forged = await c.call_tool("record_outcome", {"retrieval_id": "f" * 24, "helped": False})
            return found, done.structured_content, forged

    found, done, forged = anyio.run(session)
    memory.close()
    assert [h["text"] for h in found["hits"]] == [LESSON] and done["recorded"] == 1
    assert forged.is_error and "did not issue" in forged.content[0].text  # no vote on lessons never received
    assert _counters(n) == (1, 1)


def test_list_and_delete_over_a_node_know_the_nodes_own_lessons(node):
    from mcp import Client

    from dsonet.mcp.server import build_server

    url, n = node
    memory = open_memory(node=url, token="node-token")

    async def session():
        async with Client(build_server(memory, allow_delete=True)) as c:
            added = (await c.call_tool("add", {"text": LESSON, "domain": "math.ratio"})).structured_content
            listed = (await c.call_tool("list", {})).structured_content
            deleted = (await c.call_tool("delete", {"id": added["id"]})).structured_content
            return added, listed, deleted, (await c.call_tool("list", {})).structured_content

    added, listed, deleted, after = anyio.run(session)
    memory.close()
    assert listed["lessons"] == [{"id": added["id"], "text": LESSON, "domain": "math.ratio", "author": n.node_id,
                                  "own": True, "created_ms": listed["lessons"][0]["created_ms"]}]
    assert deleted == {"id": added["id"], "deleted": True} and after["total"] == 0
    assert n.library.tombstones() == [added["id"]]  # the node's signed delete, for its peers


def test_proxy_over_a_node_reports_the_nodes_retrieval_id(node):
    url, n = node
    httpx.post(f"{url}/experiences", json={"text": LESSON, "domain": "math.ratio"},
               headers={"Authorization": "Bearer node-token"}).raise_for_status()
    memory = open_memory(node=url, token="node-token")
    with Served(scripted_upstream()) as up, Served(create_proxy(memory, f"{up.url}/v1")) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": LESSON}])
        assert LESSON in raw.parse().choices[0].message.content
        rid = raw.headers["x-dso-retrieval-id"]
        assert httpx.post(f"{proxy.url}/v1/outcomes", json={"retrieval_id": rid, "helped": False}).json()["recorded"] == 1
    memory.close()
    assert _counters(n) == (1, 0)


def test_lessons_added_before_the_node_started_are_its_own_on_the_page_and_in_mcp_list(tmp_path):
    from mcp import Client

    from dsonet.library import Library
    from dsonet.mcp.server import build_server

    with Library(tmp_path / "node" / "library.sqlite", encoder=HashEncoder()) as lib:  # `dso add` before the node
        before = lib.add(LESSON, "math.ratio")
    with serving(tmp_path / "node", token="node-token", encoder=HashEncoder(), rule="mean") as (url, node):
        memory = open_memory(node=url, token="node-token")

        async def session():
            async with Client(build_server(memory, allow_delete=True)) as c:
                return (await c.call_tool("list", {})).structured_content

        listed = anyio.run(session)
        page = httpx.get(url + "/", headers={"Authorization": "Bearer node-token"}).text
        memory.close()
        assert [e.provenance.node_id for e in node.library.all()] == [node.node_id]
    assert [(ls["id"], ls["author"], ls["own"]) for ls in listed["lessons"]] == [(before.id, node.node_id, True)]
    assert f'<code title="{node.node_id}">{node.node_id[:12]}</code>' in page and '<span class="own">own</span>' in page
    with Library(tmp_path / "node" / "library.sqlite", encoder=HashEncoder()) as lib:  # and the file says whose
        assert lib.owner == node.node_id and lib.add("When a list must stay sorted, insert with bisect",
                                                     "code").provenance.node_id == node.node_id
