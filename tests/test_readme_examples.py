"""The README's examples, walked with default settings (no threshold given anywhere): each finds
the lesson it promises. They are read from README.md itself, so the README cannot drift from
what the code does; `dso bench relevance` never calibrates on them (`README_TEXTS`)."""

import json
import re
import shlex
from pathlib import Path

import anyio
import httpx
import openai
import pytest
from click.testing import CliRunner

from dsonet.bench.proxy import Served, scripted_upstream
from dsonet.bench.relevance import README_TEXTS, load_pairs
from dsonet.cli.main import cli
from dsonet.library.policy import ENV_MIN_SIMILARITY, default_min_similarity
from dsonet.memory import open_memory
from node_server import serving

README = (Path(__file__).parents[1] / "README.md").read_text()
SECOND_STAGE = "rescore:st:all-MiniLM-L6-v2:when-mean"  # a text search's second stage (`dsonet.encoders.rescore`)
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, re.S)

pytestmark = pytest.mark.slow


def block(lang: str, marker: str) -> str:
    (found,) = [text for kind, text in BLOCKS if kind == lang and marker in text]
    return found


@pytest.fixture(autouse=True)
def defaults(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_MIN_SIMILARITY, raising=False)
    monkeypatch.chdir(tmp_path)  # the examples write library.sqlite where they run


def test_the_calibration_data_holds_none_of_the_readmes_examples():
    lessons, queries, _ = load_pairs()
    texts = {lesson.text for lesson in lessons} | {q.text for q in queries}
    shown = set(re.findall(r'"([^"]{12,})"', README))  # every quoted sentence of the README
    assert not texts & set(README_TEXTS) and not texts & shown


def test_the_cli_example_finds_its_lesson_and_says_why_when_it_finds_none(tmp_path):
    lines = [line for line in block("bash", "dso search").splitlines() if line.startswith("dso ")]
    env = {"DSONET_DB": str(tmp_path / "cli.sqlite")}
    lesson = shlex.split(lines[0], comments=True)[2]
    searched = 0
    for line in lines:
        result = CliRunner().invoke(cli, shlex.split(line, comments=True)[1:], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        if line.startswith("dso search"):
            searched += 1
            if "stdout empty" in line:  # the README says this one finds nothing: it must say why, on stderr
                assert result.stdout == "" and result.stderr.splitlines()[-1].startswith(
                    f"no lesson above {default_min_similarity(SECOND_STAGE):.3f}; the closest scored")
            else:
                assert lesson in result.stdout
    assert searched == 2


def test_the_python_example_runs_as_written_and_finds_its_lesson(capsys):
    code = block("python", 'Library("library.sqlite")')
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "When a ratio is asked, simplify the fraction by the greatest common divisor." in out
    assert "\n- When a ratio is asked, simplify the fraction" in out  # injected as the learner does: a bullet


def test_the_langchain_example_finds_the_lesson_the_python_example_added():
    exec(compile(block("python", 'Library("library.sqlite")'), "README.md", "exec"), {})
    scope = {}
    exec(compile(block("python", "DsonetRetriever"), "README.md", "exec"), scope)
    assert [d.page_content for d in scope["docs"]] == [
        "When a ratio is asked, simplify the fraction by the greatest common divisor."]


@pytest.fixture
def node(tmp_path):
    """A node with the default encoder serving its API on a real port (as `dso node start` does)."""
    with serving(tmp_path / "node", start_s=120) as (url, _):
        yield url


def test_the_curl_example_finds_its_lesson_on_a_node(node):
    curl = block("bash", "curl -XPOST")
    submit, search = [json.loads(body) for body in re.findall(r"-d '(\{.*?\})'", curl)]
    assert httpx.post(f"{node}/experiences", json=submit, timeout=60).status_code == 201
    found = httpx.post(f"{node}/search", json=search, timeout=60).json()
    assert [h["text"] for h in found["hits"]] == [submit["text"]]
    assert found["threshold"] == default_min_similarity(SECOND_STAGE) and found["retrieval_id"]
    empty = httpx.post(f"{node}/search", json={"query": "How do I undo my last git commit?"}, timeout=60).json()
    assert empty["hits"] == [] and empty["retrieval_id"] is None and empty["best_score"] < empty["threshold"]


def _python_example_library() -> tuple[str, str]:
    """The library the Python example writes, and the question it asks."""
    code = block("python", 'Library("library.sqlite")')
    exec(compile(code, "README.md", "exec"), {})
    (question,) = re.findall(r'lib\.search\("([^"]+)"\)', code)
    return "library.sqlite", question


def test_mcp_search_finds_the_python_examples_lesson():
    from mcp import Client

    from dsonet.mcp.server import build_server

    db, question = _python_example_library()
    memory = open_memory(db=db)

    async def session():
        async with Client(build_server(memory)) as c:
            return (await c.call_tool("search", {"query": question})).structured_content

    found = anyio.run(session)
    memory.close()
    assert [h["text"] for h in found["hits"]] == [
        "When a ratio is asked, simplify the fraction by the greatest common divisor."]


def test_the_proxy_injects_the_python_examples_lesson():
    from dsonet.proxy.app import create_app as create_proxy

    db, question = _python_example_library()
    memory = open_memory(db=db)
    with Served(scripted_upstream()) as up, Served(create_proxy(memory, f"{up.url}/v1")) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user",
                                                                                    "content": question}])
        system = raw.parse().choices[0].message.content  # the scripted upstream answers with its system text
        lessons = raw.headers["x-dso-lessons"]
    memory.close()
    assert "When a ratio is asked, simplify the fraction by the greatest common divisor." in system and lessons
