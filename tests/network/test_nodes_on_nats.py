"""Three node processes on three clustered nats-servers (all real, on loopback).

One module-scoped network (the nodes load MiniLM once); the tests run in file order and each
uses its own texts. Batch interval 1 s so propagation is quick.
"""

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from dsonet.network import cluster
from dsonet.network.cluster_spec import make_spec
from dsonet.network.procs import NodeProcess

pytestmark = [pytest.mark.nats, pytest.mark.slow]

# The admission rule is "mean" (admit every verified row): these tests pin replication, and a row
# filter drops some honest rows depending on how batches group into rounds (see node.NodeConfig.rule).
# Verification, replay, re-encoding and the tombstone policy still guard the Byzantine test.
NODE_ARGS = ["--batch-interval", "1", "--rule", "mean", "--soup", "rate_limit=100000", "--log-level", "WARNING"]


def texts(tag: str, n: int) -> list[str]:
    from dsonet.data import gsm8k

    items = gsm8k()
    start = sum(map(ord, tag)) * 7 % (len(items) - n)
    return [f"When a problem reads like '{' '.join(it.question.split()[:12])}', write its equation first."
            for it in items[start:start + n]]


def wait_until(check, timeout_s: float, what: str, node: NodeProcess | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tail = f"; its log ends:\n{node.log_tail()}" if node else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{tail}")
        time.sleep(0.2)


def has(node: NodeProcess, exp_id: str) -> bool:
    return httpx.get(f"{node.url}/experiences/{exp_id}", timeout=10).status_code == 200


def submit(node: NodeProcess, text: str, domain: str = "math") -> str:
    r = httpx.post(f"{node.url}/experiences", json={"text": text, "domain": domain, "confidence": 0.8}, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def library_size(node: NodeProcess) -> int:
    return httpx.get(f"{node.url}/stats", timeout=10).json()["library"]["experiences"]


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    root = tmp_path_factory.mktemp("net")
    spec = make_spec(root / "cluster", n=3, client_port=None, cluster_port=None, http_port=None)
    nodes: list[NodeProcess] = []
    try:
        cluster.up(spec)
        nodes = [NodeProcess(root / name, spec.urls, args=NODE_ARGS).start() for name in "abc"]
        for node in nodes:
            node.wait_ready(240)
        yield spec, nodes
    finally:
        for node in nodes:
            node.stop(10)
        for server in spec.servers:
            cluster.stop_server(spec, server, timeout_s=5)


def test_experience_submitted_at_a_is_searchable_at_b_and_c_within_seconds(net):
    _, (a, b, c) = net
    text = texts("search", 1)[0]
    exp_id = submit(a, text)
    t0 = time.monotonic()
    for node in (b, c):
        def found():
            hits = httpx.post(f"{node.url}/search", json={"query": text, "k": 5, "min_similarity": 0.5},
                              timeout=30).json()["hits"]
            return any(h["id"] == exp_id for h in hits)

        wait_until(found, 20, f"{exp_id[:8]} searchable at {node.url}")
    assert time.monotonic() - t0 < 20


def test_stopping_one_nats_server_loses_nothing_acknowledged(net):
    spec, nodes = net
    batch = texts("outage", 24)
    ids: list[str] = []

    def writer():
        for i, text in enumerate(batch):
            ids.append(submit(nodes[i % 2], text))
            time.sleep(0.15)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(1.0)
    cluster.stop_server(spec, spec.servers[0], sig=signal.SIGKILL)
    thread.join()
    try:
        for node in nodes:
            wait_until(lambda: all(has(node, i) for i in ids), 60, f"all {len(ids)} experiences at {node.url}", node)
    finally:
        cluster.start_server(spec, spec.servers[0])
        cluster.wait_ready(spec, servers=[spec.servers[0]])


def test_node_killed_with_sigkill_catches_up_and_matches_the_others(net):
    _, (a, b, c) = net
    last_words = submit(c, texts("last words", 1)[0])  # stored at C, maybe unpublished when it dies
    c.kill()
    missed = [submit(a, t) for t in texts("missed", 12)]
    c.start().wait_ready(240)
    for node in (a, b, c):
        wait_until(lambda: all(has(node, i) for i in [*missed, last_words]), 60, f"catch-up at {node.url}", node)
    wait_until(lambda: len({library_size(n) for n in (a, b, c)}) == 1, 30, "equal library sizes")


def test_byzantine_process_leaves_honest_libraries_clean(net, tmp_path):
    spec, nodes = net
    before = [library_size(n) for n in nodes]
    out = tmp_path / "byzantine.json"
    script = Path(__file__).with_name("byzantine_node.py")
    subprocess.run([sys.executable, str(script), ",".join(spec.urls), str(out)], check=True, timeout=120)
    attack = json.loads(out.read_text())
    honest = submit(nodes[0], texts("after attack", 1)[0])  # a marker published after the attack
    for node in nodes:
        wait_until(lambda: has(node, honest), 30, f"marker at {node.url}", node)
        assert not any(has(node, i) for i in attack["planted"])
        assert all(has(node, i) for i in attack["targeted"])
    assert [library_size(n) for n in nodes] == [s + 1 for s in before]
    peers = httpx.get(f"{nodes[1].url}/peers", timeout=10).json()["peers"]
    assert sum(p["rejected"] for p in peers) >= 3  # garbage, forged, tampered at least


def test_malformed_requests_get_4xx_and_the_node_keeps_serving(net):
    _, (a, _, _) = net
    size = library_size(a)
    cases = [
        (b"{not json", 422),
        (json.dumps({"text": "When x, do y.", "vector": [0.1] * 7}).encode(), 400),
        (b'{"text": "When x, do y.", "vector": [NaN' + b", 0.1" * 383 + b"]}", 422),
        (json.dumps({"text": "When x, do y.", "confidence": 7}).encode(), 422),
        (json.dumps({"text": "x" * 2_000_000}).encode(), 413),
    ]
    for body, status in cases:
        r = httpx.post(f"{a.url}/experiences", content=body, headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == status, (body[:60], r.text)
        assert r.json()["detail"]
    assert httpx.get(f"{a.url}/health", timeout=10).status_code == 200
    assert library_size(a) == size
