"""A bearer-token guard for the HTTP servers agents call (`dso mcp --transport http`, `dso proxy`).

The same rule as the node's API: with a token, every request but the health check must carry
``Authorization: Bearer <token>``, compared in constant time; without one, the server must
listen on loopback only (`check_exposure`).
"""

from __future__ import annotations

import ipaddress
import secrets

from dsonet.errors import DsoError

OPEN_PATHS = frozenset({"/health"})


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


class BearerToken:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches (paths in OPEN_PATHS are open)."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send) -> None:
        if self.token is None or scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), self.token.encode()):
            return await self.app(scope, receive, send)
        detail = b"wrong token" if header else b"missing token: send 'Authorization: Bearer <token>'"
        body = b'{"detail":"' + detail + b'"}'
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
