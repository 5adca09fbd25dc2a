"""A real node to look at, for the page's tests: the default encoder, a library file with its own
lessons, two peers on the in-process log (alice, honest; mallory, whose lessons carry HTML and
script), a message nobody can decode, and outcomes that cost mallory reputation and earn alice
some; served by uvicorn on a free loopback port, on an event loop in a thread of its own."""

from __future__ import annotations

import asyncio
import threading

import uvicorn

from dsonet.asgi import server_config
from dsonet.encoders.registry import load_encoder
from dsonet.learn.context import system_text
from dsonet.network.api import create_app
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import SENDER, InProcessHub, subject_for

TOKEN = "page-token-7f3a"
OWN = [("When sorting a list in Python, call sorted() and keep the original list.", "code.python"),
       ("When a ratio is asked, simplify the fraction first.", "math"),
       ("When dividing by a variable, check that it cannot be zero.", "math")]
ALICE = [("When sorting a list in Python, call sorted() and keep the original list.", "code.python"),  # a copy
         ("When reading a CSV file, pass the encoding explicitly.", "code.python"),
         ("When an angle is asked in a triangle, use that the angles add up to 180 degrees.", "math.geometry")]
PAYLOADS = ["When sorting a list in Python, use <script>document.title='pwned'</script> first.",
            "When reading a file, do <img src=x onerror=\"document.title='pwned'\"> then close it.",
            "When quoting, write \"'><b id=injected>bold</b> and &amp; stays &amp; always.",
            "When a table ends, do </td></tr></table><h1 id=broken>escaped</h1> carefully."]


class ServedNode:
    """``start()`` builds it all and returns the page's base URL; ``call(coro)`` runs on its loop."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.nodes: list[Node] = []

    def call(self, coro, timeout_s: float = 300):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self) -> str:
        self.thread.start()
        return self.call(self._start())

    def stop(self) -> None:
        self.call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    async def _start(self) -> str:
        encoder = load_encoder("default")
        self.hub = InProcessHub()
        self.node, alice, mallory = [await self._open(name, encoder) for name in ("node", "alice", "mallory")]
        for text, domain in OWN:
            await self.node.submit(text, domain)
        for peer, lessons in ((alice, ALICE), (mallory, [(t, "code.python") for t in PAYLOADS])):
            for text, domain in lessons:
                await peer.submit(text, domain)
            await peer.flush()
            await self.hub.drained([self.node.durable])
        # a message no one can decode, in mallory's name: refused whole, before any round
        await self.hub.transport().publish(b"\x93not a batch", subject_for("dso", "batch", "code.python"),
                                           {SENDER: mallory.node_id})
        await self.hub.drained([self.node.durable])
        await self._judge(mallory.node_id, alice.node_id)
        self.peers = {"alice": alice.node_id, "mallory": mallory.node_id}
        app = create_app(self.node, token=TOKEN, manage_node=False, system_text=system_text)
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", 0, lifespan="off"))
        self.serving = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _open(self, name: str, encoder) -> Node:
        node = await Node.open(NodeConfig(self.data_dir / name, batch_interval_s=3600), self.hub.transport(),
                               encoder=encoder)
        await node.start()
        self.nodes.append(node)
        return node

    async def _judge(self, harmful: str, helpful: str) -> None:
        """Three tasks each: mallory's lessons harmed, alice's helped (reputation moves, the journal logs it)."""
        for _ in range(3):
            hits = await self.node.recall("How do I sort a list or read a file in Python?", k=20, min_similarity=-1.0)
            verdicts = {h.experience.id: harmful not in h.sources for h in hits
                        if harmful in h.sources or helpful in h.sources}
            await self.node.outcome(hits.retrieval_id, lessons=verdicts)

    async def _stop(self) -> None:
        self.server.should_exit = True
        await self.serving
        for node in self.nodes:
            await node.close()
