"""The node's page in a real browser: headless Chromium loads the page of a real node (the default
encoder, a library file, two peers, outcomes reported) served on a loopback port, and the tests
read the DOM the browser dumped, after it parsed the page and ran whatever the page let it run."""

import os
import shutil
import subprocess
from urllib.parse import urlencode

import httpx
import pytest

from dsonet.learn.context import system_text
import page_dom as dom
import served_node as served

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH; install it with `make system` "
                                                          "(apt-get install -y chromium)")]
QUESTION = "How do I sort a list in Python?"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    held = served.ServedNode(tmp_path_factory.mktemp("page"))
    held.url = held.start()
    yield held
    held.stop()


def _browse(url: str, profile, *flags: str) -> str:
    """What Chromium prints for ``url`` with ``flags`` (a fresh profile: no cookie from another test)."""
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses to run as root
    done = subprocess.run([CHROMIUM, "--headless", "--disable-gpu", *sandbox, "--no-first-run", "--disable-extensions",
                           f"--user-data-dir={profile}", *flags, url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _page(node, tmp_path, **query: str) -> dom.Element:
    return dom.parse(_browse(f"{node.url}/?{urlencode({'token': served.TOKEN, **query})}", tmp_path / "profile",
                             "--dump-dom"))


def test_the_browser_shows_the_library_the_peers_and_the_rounds_of_a_real_node(node, tmp_path):
    page = _page(node, tmp_path)
    lessons = page.find_all("tr", class_="lesson")
    texts = [(row.find_all("td", class_="text")[0].text, row) for row in lessons]
    assert sorted(t for t, _ in texts) == sorted([t for t, _ in served.OWN + served.ALICE] + served.PAYLOADS)
    copy = [r for t, r in texts if t.startswith("When sorting a list in Python, call")]
    assert [r.find_all("td")[4].text for r in copy] == ["2", "2"]  # own row and alice's copy of one lesson (after the scope column)
    alice = node.node.soup.reputation.get(node.peers["alice"])
    assert {r.find_all("td")[5].text for r in copy} == {"own", f"{alice:.3f}"}  # the signer's reputation
    peers = {row.attrs["data-node-id"]: row for row in page.find_all("tr", class_="peer")}
    assert set(peers) == set(node.peers.values())
    rep = {name: float(peers[node_id].find_all("td")[1].text) for name, node_id in node.peers.items()}
    assert rep["mallory"] < 0.5 < rep["alice"]  # three harmful outcomes against three helpful ones
    assert "(whole batch)" in peers[node.peers["mallory"]].find_all("td")[7].text  # the message nobody could decode
    plotted = {line.attrs["data-series"] for line in page.find_all("polyline", class_="series")}
    assert plotted == {node_id[:12] for node_id in node.peers.values()}
    rounds = page.find_all("tr", class_="round")
    assert rounds and sum(int(r.find_all("td")[4].text.split()[0]) for r in rounds) >= len(served.ALICE)


def test_lessons_with_html_and_script_from_a_peer_render_as_their_text(node, tmp_path):
    page = _page(node, tmp_path)
    cells = [td.text for td in page.find_all("td", class_="text")]
    for payload in served.PAYLOADS:
        assert payload in cells
    assert page.find_all("title")[0].text.startswith("dsonet node ")  # no script of theirs ran
    assert not page.find_all("script") and not page.find_all("img")
    assert page.by_id("injected") is None and page.by_id("broken") is None
    assert len(page.find_all("table", id="lessons")) == 1  # their </table> closed nothing


def test_the_query_box_shows_the_hits_of_post_search_and_the_system_text_an_agent_gets(node, tmp_path):
    page = _page(node, tmp_path, ask=QUESTION)
    form = page.by_id("ask-form")  # a GET form: submitting it loads the address this test loads
    assert form.attrs["method"] == "get" and form.attrs["action"] == "/#ask"
    assert [(i.attrs["name"], i.attrs["value"]) for i in form.find_all("input")][0] == ("ask", QUESTION)
    api = httpx.post(f"{node.url}/search", json={"query": QUESTION},
                     headers={"Authorization": f"Bearer {served.TOKEN}"}).json()
    shown = [r.attrs["data-lesson-id"] for r in page.by_id("ask-hits").find_all("tr") if "data-lesson-id" in r.attrs]
    assert shown == [h["id"] for h in api["hits"]] and shown
    assert float(page.by_id("threshold").text) == pytest.approx(api["threshold"], abs=5e-4)
    authors = [(h["text"], h["provenance"]["node_id"]) for h in api["hits"]]
    own = [text for text, author in authors if author == node.node.node_id]
    peers = [text for text, author in authors if author != node.node.node_id]
    assert page.by_id("system-text").text == system_text(own, peers)


def test_the_page_shows_nothing_without_its_token(node, tmp_path):
    for url in (f"{node.url}/", f"{node.url}/?token=wrong", f"{node.url}/?ask=sort"):
        page = dom.parse(_browse(url, tmp_path / "profile", "--dump-dom"))
        assert "needs its token" in page.text
        assert not page.find_all("tr") and "sorted()" not in page.text
    # the page's cookie opens the page only: the API's writes and reads still want the bearer token
    with httpx.Client(base_url=node.url) as client:
        assert client.get("/", params={"token": served.TOKEN}).status_code == 303  # sets the cookie
        assert client.get("/").status_code == 200
        assert client.post("/experiences", json={"text": "When X, do Y."}).status_code == 401
        assert client.get("/stats").status_code == 401
