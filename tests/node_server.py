"""A real node serving its HTTP API on a uvicorn thread, as `dso node start` does, for the tests that
talk to a node over HTTP (the store contract, MCP and the proxy over a node, the README's examples)."""

import asyncio
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from dsonet.bench.proxy import free_port
from dsonet.network.api import create_app
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub


@contextmanager
def serving(path: Path, token: str | None = None, encoder=None, start_s: float = 30.0,
            **config) -> Iterator[tuple[str, Node]]:
    """(the API's URL, the node) while a node whose data lives in ``path`` serves on a free port; ``encoder``
    None loads the node's default; ``config``: more `NodeConfig` fields."""
    import uvicorn

    port, held = free_port(), {}

    async def serve():
        held["node"] = await Node.open(NodeConfig(path, **config), InProcessHub().transport(), encoder=encoder)
        held["server"] = uvicorn.Server(uvicorn.Config(create_app(held["node"], token=token), host="127.0.0.1",
                                                       port=port, log_level="warning"))
        await held["server"].serve()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not (held.get("server") and held["server"].started):
        assert time.monotonic() < deadline and thread.is_alive(), "the node did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", held["node"]
    finally:
        held["server"].should_exit = True
        thread.join(10)
