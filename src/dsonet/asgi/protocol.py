"""HTTP/1.1 for every server the package starts (the node's API, `dso proxy`, `dso mcp --transport
http`): uvicorn's h11 protocol with deadlines on a request's headers and body, and a cap on open
connections under the process's file-descriptor limit that sheds the slowest.

uvicorn has neither a header nor a body timeout: a connection that sends its request a byte at a
time is held for ever. Its `limit_concurrency` counts such connections, so 300 of them made every
real request to `dso node start` get 503; without it, 1,100 of them used up the file
descriptors of `dso proxy` (it stopped answering, for good) and of `dso mcp` (EMFILE, and it exited).
Here:

- a request's headers must be complete within `Limits.header_timeout_s` of the connection opening
  (or of the previous response, on a kept-alive connection), and its body within
  `Limits.body_timeout_s` of its headers, else 408 and the connection closes; a body must also keep
  coming at `Limits.min_body_rate`: it gets `Limits.header_timeout_s` plus a second for each
  ``min_body_rate`` bytes it brought, so a body sent a byte at a time is cut after 10 s, not 30, by
  whoever sends it, a client holding the token as much as one without;
- at most `Limits.max_connections` sockets are open, by default `connection_cap()`: 512, or fewer
  where the fd limit (``ulimit -n``) leaves less room. Past it, the connection whose request has
  been coming in longest (headers or body) is closed to make room, so a client whose request
  arrives whole is served even while slow ones fill the table; only when every connection is
  busy with a whole request is the new one refused;
- a response sent before its request's body came in (a refusal: 401, 413) closes the connection:
  the rest of the body is not taken in (a chunked body without a token streamed 300 MB to the node
  before). The close lingers, as nginx's does: the response is followed by a FIN, and what the
  client is still sending is read and dropped for at most `LINGER_S` or `LINGER_BYTES` (a full
  table sheds a lingering connection as it sheds a slow request). Closed at once, a socket with
  unread bytes sends a reset, which discards the response's unsent end: a client sending a 2 MB
  body then read 413's headers and lost its body;
- when descriptors run out all the same (a burst of connections accepted before the cap could shed
  any), asyncio stops accepting for a second and reports each failed accept to the loop's exception
  handler; `survive_loop_errors` makes that report one line every `NOTE_EVERY_S`, never a traceback,
  and a report that fails (a log handler that itself needs a descriptor to render a traceback)
  falls back to a bare write on stderr instead of ending the process.

A deployment facing the open internet should still sit behind a reverse proxy (nginx's
``client_header_timeout``, ``client_body_timeout``, ``limit_conn``): one address can open many
connections, and this process cannot tell a slow client from an attacker.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0  # 1 MiB (the node's body limit) at 35 KB/s
MIN_BODY_RATE = 500  # bytes a second, Apache's mod_reqtimeout default: a trickle, not a slow network
MAX_CONNECTIONS = 512
# descriptors kept for what is not a client's socket: the library file and its journal, NATS,
# model files, logs, an upstream connection per proxied request (`fds_per_connection`)
FD_RESERVE = 64
LINGER_S = 1.0  # after a refusal sent before the body came in: how long the rest is read and dropped
LINGER_BYTES = 2 * 2**20  # ... and how much of it: a refused body up to this size ends without a reset
NOTE_EVERY_S = 10.0  # how often running out of descriptors is said while it lasts
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)
_TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def connection_cap(fds_per_connection: int = 1, limit: int = MAX_CONNECTIONS) -> int:
    """How many client sockets fit under this process's fd limit, at most ``limit``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, (soft - FD_RESERVE) // fds_per_connection))


log = logging.getLogger(__name__)


def survive_loop_errors(loop: asyncio.AbstractEventLoop, name: str) -> None:
    """Install on ``loop`` an exception handler that cannot end the process: descriptors running
    out are said in one line every `NOTE_EVERY_S` (asyncio resumes accepting a second later, and the
    connection cap sheds the slowest meanwhile); any other error goes to asyncio's own report."""
    quiet_until = 0.0

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        nonlocal quiet_until
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FDS:
            if loop.time() >= quiet_until:
                quiet_until = loop.time() + NOTE_EVERY_S
                soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
                _report(f"{name}: out of file descriptors (ulimit -n {soft}): new connections wait while the "
                        "slowest are shed; raise `ulimit -n` if this load is legitimate")
            return
        try:
            loop.default_exception_handler(context)
        except Exception:  # the report itself failed: a log handler that needed a descriptor, say
            _report(f"{name}: {context.get('message', 'error in the event loop')}: {exc!r}")

    loop.set_exception_handler(handle)


def _report(line: str) -> None:
    """One warning; straight to stderr when logging fails (out of descriptors, a handler's own error)."""
    try:
        log.warning(line)
    except Exception:
        os.write(2, f"{line}\n".encode(errors="replace"))


@dataclass(frozen=True)
class Limits:
    """What a client may hold of a server; one set for all three servers (`dsonet.asgi.server_config`)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int | None = None  # None: `connection_cap(fds_per_connection)`
    fds_per_connection: int = 1  # 2 for a server that opens a connection of its own per request (the proxy)
    keep_alive_s: float = 5.0  # uvicorn's idle time between two requests on one connection
    min_body_rate: float = MIN_BODY_RATE  # bytes a second a body must average past its first header_timeout_s

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.body_timeout_s <= 0 or self.min_body_rate <= 0:
            raise ValueError(f"header_timeout_s ({self.header_timeout_s}), body_timeout_s ({self.body_timeout_s}) "
                             f"and min_body_rate ({self.min_body_rate}) must be > 0")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections: {self.max_connections}; give at least 1, or None for the fd limit's")

    def body_deadline(self, received: int) -> float:
        """Seconds after its headers that a body which has brought ``received`` bytes may still take."""
        return min(self.body_timeout_s, self.header_timeout_s + received / self.min_body_rate)

    @property
    def cap(self) -> int:
        return self.max_connections or connection_cap(self.fds_per_connection)


def guarded_protocol(limits: Limits = Limits()) -> type:
    """A protocol class for ``uvicorn.Config(http=...)``; each server gets its own table of connections."""
    cap = limits.cap
    # connections whose request is still coming in (headers or body), the one that began first first
    incoming: dict[GuardedH11, asyncio.TimerHandle] = {}

    class GuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            self._lingered: int | None = None  # bytes dropped since a refusal; None before one
            super().connection_made(transport)
            if len(self.connections) > cap:
                if not incoming:  # every connection is busy with a whole request: refuse this one
                    transport.close()
                    return
                next(iter(incoming))._give_up()  # the one whose request has been coming longest makes room
            self._await_headers()

        def _await_headers(self) -> None:
            self._in_body = False
            incoming[self] = self.loop.call_later(limits.header_timeout_s, self._give_up)

        def _await_body(self) -> None:
            """The body's deadline, keeping the connection's place in the shedding order."""
            self._in_body, self._body_since, self._body_bytes = True, self.loop.time(), 0
            incoming[self].cancel()
            incoming[self] = self.loop.call_later(limits.body_deadline(0), self._body_due)

        def _body_due(self) -> None:
            # one timer per body, moved on when it fires rather than at every packet
            left = self._body_since + limits.body_deadline(self._body_bytes) - self.loop.time()
            if left > 0:
                incoming[self] = self.loop.call_later(left, self._body_due)
            else:
                self._give_up()

        def _request_in(self) -> None:
            timer = incoming.pop(self, None)
            if timer is not None:
                timer.cancel()

        def _give_up(self) -> None:
            self._request_in()
            if not self.transport.is_closing():
                if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing of a response sent yet
                    self.transport.write(_TIMEOUT_REPLY)
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._lingered is not None:
                self._lingered += len(data)
                if self._lingered > LINGER_BYTES:
                    self.transport.close()
                return
            super().data_received(data)
            if self not in incoming:
                return
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                if not self._in_body:
                    self._await_body()  # headers in (with the body's first bytes, often)
                self._body_bytes += len(data)
            elif state is not h11.IDLE:  # the whole request is in (or h11 refused it)
                self._request_in()

        def on_response_complete(self) -> None:
            if self.conn.their_state is h11.SEND_BODY:  # answered before the body came: do not take the rest in
                self._request_in()
                self._linger()
            super().on_response_complete()
            if (not self.transport.is_closing() and self._lingered is None and self not in incoming
                    and self.conn.their_state in (h11.IDLE, h11.SEND_BODY)):
                self._await_headers()  # the next request on a kept-alive connection gets its own deadline

        def _linger(self) -> None:
            self._lingered = 0
            if self.transport.can_write_eof():
                self.transport.write_eof()  # the FIN follows the response once it is sent
            # shed as a request still coming in is: refused requests must not fill the table
            incoming[self] = self.loop.call_later(LINGER_S, self._give_up)

        def connection_lost(self, exc: Exception | None) -> None:
            self._request_in()
            super().connection_lost(exc)

    return GuardedH11
