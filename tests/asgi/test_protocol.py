"""Slow clients cannot hold a server (`dsonet.asgi.protocol`): headers and bodies have deadlines, a
full table of connections gives way to a client whose request arrives whole, and a refusal sent
before a body came in closes the connection instead of reading the rest."""

import asyncio
import socket
import time

import httpx
import pytest

from dsonet.asgi import BearerToken, BodyLimit, server_config
from dsonet.asgi.protocol import FD_RESERVE, LINGER_BYTES, MAX_CONNECTIONS, Limits, connection_cap
from dsonet.network.cluster_spec import free_ports

PARTIAL_HEADERS = b"GET /health HTTP/1.1\r\nHost: node\r\nX-Slow: "  # headers that never end
PARTIAL_BODY = b"POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: 1000\r\n\r\nx"  # a body that never ends


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the whole body, as an endpoint taking JSON does
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        data = sock.recv(1024)
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408")


def _still_open(sock: socket.socket) -> bool:
    """Open with nothing to read yet (not closed, not answered), without waiting."""
    sock.setblocking(False)
    try:
        sock.recv(1024, socket.MSG_PEEK)  # data or an end: answered or closed by the server
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def _serving(app, limits: Limits, attack):
    """Run ``app`` with ``limits`` on a free port; ``attack(port, loop, client)`` runs while it serves."""
    port = free_ports(1)[0]

    async def main():
        import uvicorn

        server = uvicorn.Server(server_config(app, "127.0.0.1", port, limits, lifespan="off"))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
                return await attack(port, asyncio.get_running_loop(), client)
        finally:
            server.should_exit = True
            await serving

    return asyncio.run(main())


def _open(port: int, n: int, first: bytes) -> list[socket.socket]:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for s in socks:
        s.sendall(first)
    return socks


@pytest.mark.parametrize("partial", [PARTIAL_HEADERS, PARTIAL_BODY], ids=["headers", "body"])
def test_slow_requests_time_out_and_a_full_table_gives_way_to_a_whole_request(partial):
    async def attack(port, loop, client):
        socks = await loop.run_in_executor(None, _open, port, 16, partial)  # twice what the table holds
        during = (await client.post("/echo", content=b"{}")).status_code
        waiting = sum(_still_open(s) for s in socks)  # slow ones the deadlines have not closed yet
        await asyncio.sleep(1.5)  # past both deadlines
        closed = await loop.run_in_executor(None, lambda: [_closed_by_server(s) for s in socks])
        for s in socks:
            s.close()
        return during, waiting, closed

    during, waiting, closed = _serving(_app, Limits(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=8),
                                       attack)
    # before: a slow body was never shed nor timed out; with the table full of them a new client was refused.
    # Served while slow connections were still open: the table gave way, the client did not wait out a deadline
    assert during == 200 and waiting > 0
    assert all(closed)


def _send_body(port: int, chunk: bytes, every_s: float, for_s: float) -> bytes:
    """A 1 MB body sent as ``chunk`` every ``every_s`` for at most ``for_s``: the server's first answer
    (b"" where none came by then)."""
    sock = _open(port, 1, b"POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: 1000000\r\n\r\n")[0]
    sock.settimeout(every_s)
    t = time.perf_counter()
    answer = b""
    while time.perf_counter() - t < for_s and not answer:
        try:
            sock.sendall(chunk)
            answer = sock.recv(1024)
        except socket.timeout:
            continue
        except OSError:
            break
    sock.close()
    return answer


def test_a_body_that_keeps_trickling_is_cut_at_its_deadline_even_while_bytes_come():
    async def attack(port, loop, client):
        return await loop.run_in_executor(None, _send_body, port, b"x", 0.2, 5.0)  # never idle, never done

    answer = _serving(_app, Limits(body_timeout_s=1.0), attack)
    # a 408 came while bytes kept coming: the body's deadline, not an idle timer and not the client, ended it
    assert answer.startswith(b"HTTP/1.1 408")


def test_a_body_slower_than_the_minimum_rate_is_cut_long_before_the_body_deadline():
    limits = Limits(header_timeout_s=1.0, body_timeout_s=30.0, min_body_rate=500)

    async def attack(port, loop, client):
        trickle = loop.run_in_executor(None, _send_body, port, b"x", 0.2, 5.0)  # 5 B/s
        steady = loop.run_in_executor(None, _send_body, port, b"x" * 2000, 0.2, 3.0)  # 10 KB/s
        return await trickle, await steady

    trickled, steady = _serving(_app, limits, attack)
    # answered while the trickle was still sending (it gives up after 5 s): the rate's cut, since the
    # body's own deadline (30 s) cannot have come
    assert trickled.startswith(b"HTTP/1.1 408")
    assert steady == b""  # 3 s in, past the grace: still being read


def test_a_refusal_at_the_headers_closes_the_connection_without_reading_the_body():
    token_app = BearerToken(BodyLimit(_app, 1024), "secret")
    smuggled = b"POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"  # 64 KiB, well framed: a server that reads on takes them all

    async def attack(port, loop, client):
        def send():
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(smuggled + chunk)
            sock.settimeout(5)
            answer = sock.recv(4096)
            sent, t = 0, time.perf_counter()
            try:  # keep streaming as the attack did: a server that reads on takes it all
                while sent < 50 * 2**20 and time.perf_counter() - t < 5:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            sock.close()
            return answer, sent

        return await loop.run_in_executor(None, send)

    answer, sent = _serving(token_app, Limits(), attack)
    assert answer.startswith(b"HTTP/1.1 401")
    assert sent < 8 * 2**20  # before: the whole 50 MB went in after the 401 (the attack streamed 300 MB)


def test_a_client_still_sending_a_refused_body_reads_the_whole_refusal_and_a_clean_end():
    """Closed at once, the node reset a connection whose refused body was still coming, and the
    reset could discard the 413's unsent end (a fresh-clone CI run read its headers, then 0 of 78
    body bytes). Now the close lingers: the client finishes sending and reads all of it."""
    app = BodyLimit(_app, 1024)
    body = b"x" * (LINGER_BYTES // 2)

    async def attack(port, loop, client):
        def send():
            sock = socket.create_connection(("127.0.0.1", port))
            sock.settimeout(5)
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: %d\r\n\r\n" % len(body))
            head = sock.recv(4096, socket.MSG_PEEK)  # the refusal came before any of the body
            sock.sendall(body)  # before: BrokenPipeError, the node had closed
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            sock.close()
            return head, answer

        return await loop.run_in_executor(None, send)

    head, answer = _serving(app, Limits(), attack)
    assert head.startswith(b"HTTP/1.1 413")
    headers, _, payload = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    assert len(payload) == length and b"request body over 1024 bytes" in payload


def test_refused_requests_whose_close_lingers_give_way_to_a_whole_request():
    """A refusal's lingering close keeps its connection a second: a table full of them is shed as one full
    of slow requests is, so a burst of oversized requests cannot lock a fresh client out."""
    app = BodyLimit(_app, 1024)
    oversized = b"POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: 100000\r\n\r\n"

    async def attack(port, loop, client):
        def refused():
            socks = _open(port, 8, oversized)  # the whole table
            for sock in socks:
                sock.settimeout(5)
                assert sock.recv(4096, socket.MSG_PEEK).startswith(b"HTTP/1.1 413")  # refused, now lingering
            return socks

        socks = await loop.run_in_executor(None, refused)
        status = (await client.post("/echo", content=b"{}")).status_code
        for sock in socks:
            sock.close()
        return status

    assert _serving(app, Limits(max_connections=8), attack) == 200


def test_the_connection_cap_stays_under_the_fd_limit():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap() == min(MAX_CONNECTIONS, soft - FD_RESERVE)
    assert connection_cap(2) <= (soft - FD_RESERVE) // 2
    with pytest.raises(ValueError, match="max_connections"):
        Limits(max_connections=0)


def test_the_api_description_needs_the_token_and_health_does_not():
    async def attack(port, loop, client):
        return [(await client.get(path)).status_code for path in ("/docs", "/openapi.json", "/health")]

    codes = _serving(BearerToken(_app, "secret"), Limits(), attack)
    assert codes == [401, 401, 200]  # before: /docs and /openapi.json answered anyone
