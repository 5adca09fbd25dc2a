"""`dso node start`, `dso mcp --transport http` and `dso proxy` each say one line when ready,
``... listening on URL``, and take requests at once: each is run as a user runs it, in its own
process, and talked to with a real client as soon as the line appears."""

import anyio
import httpx
import pytest

openai = pytest.importorskip("openai", reason="the proxy's banner test talks through the openai SDK: the learn extra installs it")

from dso_process import Server  # noqa: E402

from dsonet.bench.proxy import Served, free_port, scripted_upstream  # noqa: E402
from dsonet.encoders.registry import load_encoder  # noqa: E402
from dsonet.library import Library  # noqa: E402


def test_dso_node_start_says_where_it_listens_once_when_ready(tmp_path):
    port = free_port()
    server = Server("node", "start", "--data-dir", str(tmp_path / "node"), "--encoder", "none", "--dim", "16",
                    "--port", str(port))
    try:
        line = server.banner()
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
    finally:
        lines = server.stop()
    assert line.startswith("dso node ") and line.endswith(f" listening on http://127.0.0.1:{port}")
    assert sum("listening on" in x for x in lines) == 1


def test_dso_proxy_says_where_it_listens_once_when_ready(tmp_path):
    port = free_port()
    Library(tmp_path / "lib.sqlite", encoder=load_encoder("wordllama")).close()  # the proxy reads, never creates
    with Served(scripted_upstream()) as up:
        server = Server("proxy", "--upstream", f"{up.url}/v1", "--db", str(tmp_path / "lib.sqlite"),
                        "--encoder", "wordllama", "--port", str(port))
        try:
            line = server.banner()
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user",
                                                                                         "content": "hi"}])
            assert raw.headers["x-dso-lessons"] == ""
        finally:
            lines = server.stop()
    assert line == f"dso proxy listening on http://127.0.0.1:{port}/v1"
    assert sum("listening on" in x for x in lines) == 1


def test_dso_mcp_over_http_says_where_it_listens_and_searches_with_its_own_threshold(tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    server = Server("mcp", "--transport", "http", "--db", str(tmp_path / "lib.sqlite"), "--encoder", "wordllama",
                    "--port", str(port), "-k", "1", "--min-similarity", "0.15")

    async def session(url: str):
        async with Client(streamable_http_client(url)) as c:
            await c.call_tool("add", {"text": "When a ratio is given, write both parts as multiples of one unknown",
                                      "domain": "math.ratio"})
            await c.call_tool("add", {"text": "When a ratio of boys to girls is given, add the parts first",
                                      "domain": "math.ratio"})
            return (await c.call_tool("search", {"query": "The ratio of boys to girls is 3:5; how many girls?"}))

    try:
        line = server.banner()
        found = anyio.run(session, line.split("listening on ")[1])
    finally:
        lines = server.stop()
    assert line == f"dso mcp listening on http://127.0.0.1:{port}/mcp"
    assert sum("listening on" in x for x in lines) == 1
    assert found.structured_content["threshold"] == 0.15 and len(found.structured_content["hits"]) == 1  # -k 1
