"""The node's HTTP/1.1 protocol: uvicorn's h11 one, with a deadline on request headers and a
cap on open connections that gives way to new clients.

uvicorn has no header timeout: a connection that sends its headers a byte at a time is held
for ever, and `limit_concurrency` counts such connections, so 300 of them made every real
request to `dso node start` get 503 for as long as they stayed (measured, issue 14). Here:

- a request's headers must be complete within `HEADER_TIMEOUT_S` of the connection opening
  (or of the previous response, on a kept-alive connection), else 408 and the connection closes;
- at most `MAX_CONNECTIONS` sockets are open (each one a file descriptor; the usual limit is
  1,024): past it the connection that has waited longest for its headers is closed to make room,
  so a client whose request arrives whole is served even while slow ones fill the table; only
  when every connection is busy with a request is the new one refused.

A deployment facing the open internet should still sit behind a reverse proxy (nginx's
``client_header_timeout``, ``limit_conn``): one address can open many connections, and this
process cannot tell a slow client from an attacker.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 512
_TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> type:
    """A protocol class for ``uvicorn.Config(http=...)``; each server gets its own table of waiting connections."""
    waiting: dict[GuardedH11, asyncio.TimerHandle] = {}  # connections still sending headers, oldest first

    class GuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                if not waiting:  # every connection is busy with a request: refuse this one
                    transport.close()
                    return
                next(iter(waiting))._give_up()  # the one that has waited longest makes room
            self._await_headers()

        def _await_headers(self) -> None:
            waiting[self] = self.loop.call_later(header_timeout_s, self._give_up)

        def _headers_done(self) -> None:
            timer = waiting.pop(self, None)
            if timer is not None:
                timer.cancel()

        def _give_up(self) -> None:
            self._headers_done()
            if not self.transport.is_closing():
                self.transport.write(_TIMEOUT_REPLY)
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self in waiting and self.conn.their_state is not h11.IDLE:  # a whole request line and headers
                self._headers_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE and self not in waiting:
                self._await_headers()  # the next request on a kept-alive connection gets its own deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_done()
            super().connection_lost(exc)

    return GuardedH11
