"""Run one node process: transport + node + HTTP API in one asyncio loop, until SIGTERM/SIGINT.

Shutdown is graceful: the HTTP server stops taking requests, the node publishes what is
pending and closes its transport and library, then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

from dsonet.asgi import AnnouncedServer, bind, check_exposure, server_config
from dsonet.network.access import serving
from dsonet.network.api import DEFAULT_MAX_BODY, create_app
from dsonet.network.jetstream import NatsConfig, NatsTransport
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub
from dsonet.network.web import SystemText


class _Server(AnnouncedServer):
    # uvicorn re-raises SIGTERM after serving, which would end the process with -15 even after a
    # clean shutdown; this loop installs its own handlers instead (see serve_node).
    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def serve_node(config: NodeConfig, nats: NatsConfig | None, host: str = "127.0.0.1", port: int = 8080,
                     token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY,
                     system_text: SystemText | None = None) -> None:
    """``nats`` None: a standalone node on an in-process log (nothing is shared). ``system_text``: the
    learner's injection template, for the node's page (`dsonet.network.web.page`)."""
    with serving():  # BLAS leaves a core to the searches (`dsonet.network.access`)
        await _serve(config, nats, host, port, token, max_body_bytes, system_text)


async def _serve(config: NodeConfig, nats: NatsConfig | None, host: str, port: int, token: str | None,
                 max_body_bytes: int, system_text: SystemText | None) -> None:
    check_exposure(host, token)  # beyond loopback only with a token (an empty one is none)
    sock = bind(host, port)  # a busy port is told before the node opens its library
    transport = await NatsTransport.connect(nats, name=f"dso-{config.data_dir.name}") if nats else InProcessHub().transport()
    node = await Node.open(config, transport)
    app = create_app(node, token=token, max_body_bytes=max_body_bytes, system_text=system_text)
    # slow or idle clients cannot hold the node's sockets: deadlines on headers and bodies, a cap on
    # connections that closes the slowest first, 5 s of keep-alive (`dsonet.asgi.protocol`)
    server = _Server(server_config(app, host, port, lifespan="on"),
                     f"dso node {node.node_id[:16]}")  # says "listening on" once started (docs at /docs)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    await server.serve(sockets=[sock])
