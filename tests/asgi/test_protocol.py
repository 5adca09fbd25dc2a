"""Slow clients cannot hold the node's HTTP server: headers have a deadline, and a full table of
connections gives way to a client whose request arrives whole."""

import asyncio
import socket
import time

import httpx
import pytest
import uvicorn

from dsonet.network.cluster import free_ports
from dsonet.network.protocol import HEADER_TIMEOUT_S, MAX_CONNECTIONS, guarded_protocol

PARTIAL = b"GET /health HTTP/1.1\r\nHost: node\r\nX-Slow: "  # headers that never end


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        data = sock.recv(1024)
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408")


def test_slow_headers_time_out_and_a_full_table_gives_way_to_a_whole_request():
    port = free_ports(1)[0]

    async def main():
        config = uvicorn.Config(_ok, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                http=guarded_protocol(header_timeout_s=1.0, max_connections=8))
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()

        def attack():
            socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]  # more than the table holds
            for s in socks:
                s.sendall(PARTIAL)
            return socks

        socks = await loop.run_in_executor(None, attack)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            during = (await client.get("/health")).status_code
        await asyncio.sleep(1.5)  # past the header deadline
        closed = await loop.run_in_executor(None, lambda: [_closed_by_server(s) for s in socks])
        for s in socks:
            s.close()
        server.should_exit = True
        await serving
        return during, closed

    during, closed = asyncio.run(main())
    assert during == 200
    assert all(closed)


@pytest.mark.slow
def test_a_node_process_answers_through_a_slowloris_and_drops_it_after_the_header_deadline(tmp_path):
    from dsonet.network.procs import NodeProcess

    node = NodeProcess(tmp_path, [], args=["--encoder", "none", "--dim", "16", "--log-level", "WARNING"])
    node.start().wait_ready()
    socks = []
    try:
        for _ in range(MAX_CONNECTIONS + 50):
            s = socket.create_connection(("127.0.0.1", node.port))
            s.sendall(PARTIAL)
            socks.append(s)
        with node.client(timeout=5) as client:
            answered = [client.get("/stats").status_code for _ in range(3)]
        time.sleep(HEADER_TIMEOUT_S + 2)
        closed = [_closed_by_server(s) for s in socks]
    finally:
        for s in socks:
            s.close()
        node.stop()
    assert answered == [200, 200, 200]  # uvicorn alone answered 503 to every request (limit_concurrency)
    assert all(closed)
