"""Who may read the node's page: the API's token, once, in the address; a cookie after that.

A browser cannot send ``Authorization: Bearer``, so ``GET /?token=<token>`` (on the page's paths only:
``/``, ``/docs`` and ``/openapi.json``) is checked in constant time and answered with a redirect to
the same path (the rest of the address kept) that
sets a cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
Path=/. The cookie holds a keyed digest of the token, never the token: it opens the page and the
API's description (``PAGE_PATHS``, GET and HEAD), and nothing else. Every other request goes on to the API's own
guard (`dsonet.asgi.BearerToken`), which reads the Authorization header only, so the cookie can
never write through the API; with the redirect, the token leaves the address bar at once.

Without a token (a node on loopback) the page is open, like the API.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from dsonet.network.web.html import CSP, refusal

PAGE_PATHS = frozenset({"/", "/docs", "/openapi.json"})  # the page, and the API's description for people
COOKIE = "dso_page"
NO_TOKEN = "This node needs its token: open /?token=<the node's token> (the --token it was started with) once."


def page_cookie(token: str) -> str:
    """The cookie's value for ``token``: a digest only this node's token makes, useless as a bearer token."""
    return hmac.new(token.encode(), b"dsonet node page v1", hashlib.sha256).hexdigest()


class PageGate:
    """ASGI: let the page through on its cookie or its one-time ``?token=``; send the rest to ``api``
    (the app behind its bearer-token guard). ``page`` is the same app without that guard."""

    def __init__(self, api, page, token: str | None):
        self.api, self.page, self.token = api, page, token or None
        self.cookie = page_cookie(self.token) if self.token else ""

    def __getattr__(self, name: str):  # callers reach the FastAPI app through the guards (routes, openapi)
        return getattr(self.page, name)

    async def __call__(self, scope, receive, send) -> None:
        if (not self.token or scope["type"] != "http" or scope.get("path") not in PAGE_PATHS
                or scope.get("method") not in ("GET", "HEAD")):
            return await self.api(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if given:
            if secrets.compare_digest(given[-1].encode("utf-8", "replace"), self.token.encode()):
                rest = urlencode([(k, v) for k, v in query if k != "token"])  # a bookmarked question stays
                location = (scope["path"] + ("?" + rest if rest else "")).encode("latin-1")
                return await _reply(send, 303, b"", [(b"location", location), (b"set-cookie", self._set_cookie())])
            return await _reply(send, 401, refusal(401, "Wrong token. " + NO_TOKEN).encode(), _html())
        if self._cookie_ok(headers.get(b"cookie", b"")):
            return await self.page(scope, receive, send)
        if b"authorization" in headers:  # a script with the bearer token: the API's guard judges it
            return await self.api(scope, receive, send)
        return await _reply(send, 401, refusal(401, NO_TOKEN).encode(), _html())

    def _set_cookie(self) -> bytes:
        return f"{COOKIE}={self.cookie}; Path=/; HttpOnly; SameSite=Strict".encode()

    def _cookie_ok(self, header: bytes) -> bool:
        jar = SimpleCookie()
        try:
            jar.load(header.decode("latin-1"))
        except CookieError:
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and secrets.compare_digest(morsel.value.encode(), self.cookie.encode())


def _html() -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"text/html; charset=utf-8"), (b"content-security-policy", CSP.encode()),
            (b"cache-control", b"no-store")]


async def _reply(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
