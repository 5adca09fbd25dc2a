"""Who reads the node's page: the token once in the address (on / only), a page-only cookie after it
(HttpOnly, SameSite=Strict, not the token), never the API; the page's headers; a node without a token
open on loopback as its API is; peers' HTML in the markup the server sends is escaped."""

import asyncio

import httpx
import numpy as np

from dsonet.network.api import create_app
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub
from dsonet.network.web import page_cookie
from dsonet.scope import Scope

DIM = 16
TOKEN = "gate-token"


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _with_node(tmp_path, token, check, texts=("When case 1 comes, do step 1.",), scope=Scope()):
    async def main():
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600),
                               InProcessHub().transport())
        await node.start()
        for i, text in enumerate(texts):
            await node.submit(text, "math", vector=_vec(i), scope=scope)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(node, token=token, manage_node=False)),
                                   base_url="http://node")
        try:
            return await check(client)
        finally:
            await client.aclose()
            await node.close()

    return asyncio.run(main())


def test_the_token_in_the_address_sets_a_page_cookie_that_opens_the_page_and_nothing_else(tmp_path):
    async def check(client):
        refused = await client.get("/")
        wrong = await client.get("/", params={"token": "guess"})
        elsewhere = await client.get("/stats", params={"token": TOKEN})
        welcome = await client.get("/", params={"token": TOKEN, "text": "case"})
        cookie = {"cookie": welcome.headers["set-cookie"].split(";")[0]}
        page = await client.get("/", headers=cookie)
        api = [(await client.request(method, path, headers=cookie, json=body)).status_code
               for method, path, body in [("POST", "/experiences", {"text": "When X, do Y."}), ("GET", "/stats", None),
                                          ("DELETE", "/experiences/abc", None),
                                          ("POST", "/keys/" + "a" * 64 + "/ban", None),
                                          ("POST", "/", None)]]
        forged = await client.get("/", headers={"cookie": f"dso_page={TOKEN}"})
        bearer = await client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        return refused, wrong, elsewhere, welcome, page, api, forged, bearer

    refused, wrong, elsewhere, welcome, page, api, forged, bearer = _with_node(tmp_path, TOKEN, check)
    for r in (refused, wrong, forged):
        assert r.status_code == 401 and "needs its token" in r.text and "When case 1" not in r.text
    assert elsewhere.status_code == 401  # the address carries the token to the page's paths only
    assert welcome.status_code == 303 and welcome.headers["location"] == "/?text=case"
    attrs = [a.strip() for a in welcome.headers["set-cookie"].split(";")]
    assert attrs[0] == f"dso_page={page_cookie(TOKEN)}" and TOKEN not in attrs[0]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attrs[1:])
    assert page.status_code == 200 and "When case 1 comes, do step 1." in page.text
    assert api == [401, 401, 401, 401, 401]  # the cookie writes nothing, reads nothing of the API
    assert bearer.status_code == 200  # a script with the API's token may read the page too


def test_the_page_sends_a_policy_that_runs_no_script_and_loads_nothing_from_elsewhere(tmp_path):
    async def check(client):
        return await client.get("/")

    page = _with_node(tmp_path, None, check)  # no token: open, as the API is, on loopback
    assert page.status_code == 200
    policy = dict(p.strip().split(" ", 1) for p in page.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["style-src"].startswith("'sha256-")
    assert "script-src" not in policy and "<script" not in page.text
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["cache-control"] == "no-store"
    assert "http://" not in page.text.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_a_lesson_holding_html_reaches_the_markup_escaped(tmp_path):
    payload = "When asked, do <script>alert(1)</script> and \"'><img src=x onerror=alert(2)> now."

    async def check(client):
        return await client.get("/", params={"text": "asked"})

    page = _with_node(tmp_path, None, check, texts=(payload,))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script" not in page.text and "<img" not in page.text
    assert 'value="asked"' in page.text  # the filter echoed back, in an attribute, escaped too


def test_the_page_shows_each_lessons_scope(tmp_path):
    async def check(client):
        return await client.get("/")

    page = _with_node(tmp_path, None, check, scope=Scope.parse(["numpy==2.4.6", "python==3.12.1"]))
    assert '<td class="scope">numpy==2.4.6,python==3.12.1</td>' in page.text


def test_docs_list_every_route_offline_and_open_with_the_page_login(tmp_path):
    async def check(client):
        refused = await client.get("/docs")
        welcome = await client.get("/docs", params={"token": TOKEN})
        cookie = {"cookie": welcome.headers["set-cookie"].split(";")[0]}
        return refused, welcome, await client.get("/docs", headers=cookie), await client.get("/openapi.json", headers=cookie)

    refused, welcome, docs, spec = _with_node(tmp_path, TOKEN, check)
    assert refused.status_code == 401 and "needs its token" in refused.text
    assert welcome.status_code == 303 and welcome.headers["location"] == "/docs"
    assert docs.status_code == 200 and spec.status_code == 200
    for path in spec.json()["paths"]:
        assert f"<code>{path}</code>" in docs.text
    assert 'href="/openapi.json"' in docs.text and "<code>query</code>" in docs.text  # POST /search's body fields
    assert "<script" not in docs.text and "cdn" not in docs.text.lower()  # nothing to fetch from elsewhere
    assert docs.headers["content-security-policy"].startswith("default-src 'none'")
