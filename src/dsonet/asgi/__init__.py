"""The guards of every HTTP server here (the node's API, `dso mcp --transport http`, `dso proxy`).

On the connection (`dsonet.asgi.protocol`, set up by `server_config` for all three): deadlines on a
request's headers and body, a cap on connections under the fd limit that sheds the slowest.
At the ASGI level, so that they act before the app reads a byte of a request's body:

- `BearerToken`: with a token, every request but the health check must carry
  ``Authorization: Bearer <token>``, compared in constant time (the API's description too: it
  names every route); without one, the server must listen on loopback only (`check_exposure`);
- `BodyLimit`: bodies over the limit (declared or streamed) get 413, a request with two framings
  (Content-Length and Transfer-Encoding) 400.

Their refusals are FastAPI's ``{"detail": ...}`` unless the server speaks another API's error shape
(``error_body``: the proxy answers as OpenAI does). `AnnouncedServer` is the uvicorn server all
three run on: it says one "listening on URL" line once the app has started and the socket is bound.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import secrets
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

from dsonet.asgi.protocol import Limits, guarded_protocol, survive_loop_errors
from dsonet.errors import DsoError

ErrorBody = Callable[[int, str], bytes]  # (status, message) -> the JSON body of a refusal

OPEN_PATHS = frozenset({"/health"})  # liveness


class PortInUse(DsoError, OSError):
    """A server's address is held by another process; `dso` exits with ``exit_code`` (README, CLI reference)."""

    exit_code = 3  # uvicorn's own code for a failed bind, kept so that scripts written against it still work


class ExposureError(DsoError, ValueError):
    """A server asked to listen beyond loopback without a token."""


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token (anyone on the network could read and write lessons)."""
    if token:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ExposureError(f"--host {host}: listening beyond loopback needs --token (or DSONET_TOKEN)")


def detail_body(status: int, message: str) -> bytes:
    """FastAPI's error shape, the node's and `dso mcp`'s."""
    return json.dumps({"detail": message}).encode()


class AnnouncedServer(uvicorn.Server):
    """uvicorn's server, saying ``<name> listening on http://HOST:PORT<path>`` on stderr once it is
    ready: after the app's lifespan has started (models loaded) and the socket is bound. Errors its
    loop reports, descriptors running out among them, cannot end it (`survive_loop_errors`)."""

    def __init__(self, config: uvicorn.Config, name: str, path: str = ""):
        super().__init__(config)
        self.name, self.path = name, path

    async def startup(self, sockets=None) -> None:
        survive_loop_errors(asyncio.get_running_loop(), self.name)
        await super().startup(sockets)
        if self.started:
            print(f"{self.name} listening on {self.url}", file=sys.stderr, flush=True)

    @property
    def url(self) -> str:
        """The bound address (the real port when 0 was asked for)."""
        port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
        host = self.config.host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{self.path}"


def server_config(app, host: str, port: int, limits: Limits = Limits(), **config: Any) -> uvicorn.Config:
    """uvicorn's settings for every server here: the guarded protocol (`dsonet.asgi.protocol`) with
    ``limits``. uvicorn's own ``limit_concurrency`` stays off: it counts connections still sending
    their request, so slow ones could make every real request 503; requests in flight are bounded
    by the connection cap. A SIGTERM waits at most ``timeout_graceful_shutdown`` (10 s) for requests in
    flight: a server that slow clients or open sessions hold still exits."""
    config.setdefault("timeout_graceful_shutdown", 10)
    return uvicorn.Config(app, host=host, port=port, log_level="warning", http=guarded_protocol(limits),
                          timeout_keep_alive=limits.keep_alive_s, **config)


def bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything slow starts (a model, a node), so that a busy port is
    `PortInUse` at once, saying which, rather than uvicorn's log line after the start."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart reuses the port at once
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"--port {port}: {host}:{port} is in use by another process; stop it, or give another "
                            "--port") from None
        raise DsoError(f"--host {host} --port {port}: cannot listen there ({exc.strerror}); give a local address "
                       "and a port above 1023") from None
    sock.set_inheritable(True)
    return sock


def serve(app, host: str, port: int, name: str, path: str = "", limits: Limits = Limits(),
          sock: socket.socket | None = None, **config: Any) -> None:
    """Run ``app`` with uvicorn until Ctrl-C/SIGTERM, announcing it once it is ready (`AnnouncedServer`);
    on ``sock`` where the caller bound it already (`bind`)."""
    sock = sock or bind(host, port)
    AnnouncedServer(server_config(app, host, port, limits, **config), name, path).run(sockets=[sock])


class BearerToken:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches (paths in OPEN_PATHS are open)."""

    def __init__(self, app, token: str | None, error_body: ErrorBody = detail_body):
        self.app, self.token, self.error_body = app, token, error_body

    async def __call__(self, scope, receive, send) -> None:
        if not self.token or scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), self.token.encode()):
            return await self.app(scope, receive, send)
        detail = "wrong token" if header else "missing token: send 'Authorization: Bearer <token>'"
        await _reply(send, 401, self.error_body(401, detail), [(b"www-authenticate", b"Bearer")])


class BodyLimit:
    """ASGI middleware: refuse bodies over the limit (declared or streamed) with 413."""

    def __init__(self, app, max_bytes: int, hint: str = "send one experience per request",
                 error_body: ErrorBody = detail_body):
        self.app, self.max_bytes, self.hint, self.error_body = app, max_bytes, hint, error_body

    def __getattr__(self, name: str) -> Any:  # let callers reach the FastAPI app (routes, openapi...)
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and b"transfer-encoding" in headers:  # two framings: a smuggling attempt
            return await _reply(send, 400, self.error_body(400, "both Content-Length and Transfer-Encoding; send one"))
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.max_bytes:
                return await self._too_large(send)
            return await self.app(scope, receive, send)
        # chunked body, no declared length: read it (up to the limit) before the app sees it
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._too_large(send)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        await _reply(send, 413, self.error_body(413, f"request body over {self.max_bytes} bytes; {self.hint}"))


async def _reply(send, status: int, body: bytes, headers: list | None = None) -> None:
    """A JSON error answered at the ASGI level: the app, and the request's body, are never reached."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
