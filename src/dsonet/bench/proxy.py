"""`dso bench proxy`: the latency `dso proxy` adds to a chat completion (p50, p99).

The upstream is an instrument: an OpenAI-compatible app that answers at once (it echoes the
system message it received), so every millisecond measured is the proxy's. Requests go from
the `openai` client to the upstream directly and through `dso proxy`, interleaved, over real
sockets; the upstream and the proxy run in their own processes, as deployed. Rows: the proxy with an empty library (forwarding and one query encoding), and with a
library of lessons (encoding, search over the codes, injection). The encoder is the network's
default (MiniLM + Zen head) unless ``--encoder`` names another.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from dsonet.encoders.registry import load_encoder
from dsonet.experience import Experience
from dsonet.library import Library

RESULTS = Path("bench/results")
LESSON_TEMPLATES = [
    "When a {0} is given, write both parts as multiples of one unknown",
    "When {0} items are sorted, compare neighbours before swapping",
    "When a {0} problem mentions rates, write the units beside every number",
    "When unsure about the {0}, check the smallest case by hand first",
]


def scripted_upstream():
    """An OpenAI-compatible upstream that answers at once with the system text it received.
    ``app.state.requests`` keeps every request body, for tests to inspect."""
    app = FastAPI()
    app.state.requests = []

    def system_text(body: dict) -> str:
        if "messages" in body:
            first = body["messages"][0] if body["messages"] else {}
            return first.get("content", "") if first.get("role") in ("system", "developer") else ""
        return body.get("instructions") or ""

    def sse(events: list[dict], named: bool) -> StreamingResponse:
        def lines():
            for e in events:
                yield (f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n"
            if not named:
                yield "data: [DONE]\n\n"
        return StreamingResponse(lines(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        text, model = system_text(body), body.get("model", "scripted")
        if body.get("stream"):
            words = text.split(" ")
            chunks = [{"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model,
                       "choices": [{"index": 0, "delta": {"content": w if i == 0 else " " + w}, "finish_reason": None}]}
                      for i, w in enumerate(words)]
            chunks.append({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model,
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            return sse(chunks, named=False)
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 0, "model": model,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    @app.post("/v1/responses")
    async def responses(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        text = system_text(body)
        message = {"type": "message", "id": "m1", "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}
        response = {"id": "r1", "object": "response", "created_at": 0, "status": "completed",
                    "model": body.get("model", "scripted"), "output": [message], "parallel_tool_calls": False,
                    "tool_choice": "auto", "tools": []}
        if body.get("stream"):
            events = [{"type": "response.created", "sequence_number": 0, "response": {**response, "output": [],
                                                                                       "status": "in_progress"}},
                      {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "m1",
                       "output_index": 0, "content_index": 0, "delta": text, "logprobs": []},
                      {"type": "response.completed", "sequence_number": 2, "response": response}]
            return sse(events, named=True)
        return JSONResponse(response)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "dsonet"}]}

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An ASGI app on a uvicorn thread at http://127.0.0.1:PORT, for as long as the `with` block runs."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Served":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _timed(client, n: int, question: str) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": f"{question} #{i}"}])
        out.append((time.perf_counter() - t) * 1000)
    return out


class Process:
    """A server in its own process (as deployed), ready once ``probe`` answers 200; stopped on exit."""

    def __init__(self, args: list[str], port: int, probe: str):
        self.args, self.url, self.probe = args, f"http://127.0.0.1:{port}", probe

    def __enter__(self) -> "Process":
        self.proc = subprocess.Popen([sys.executable, *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300  # the proxy loads its encoder first
        while True:
            try:
                if httpx.get(self.url + self.probe, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{' '.join(self.args[:4])} did not start: {self.proc.stderr.read().decode()[-500:]}")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _build_library(path: Path, size: int, encoder: str) -> str:
    """A library of ``size`` lessons, one of them about the bench's question; returns its encoder id."""
    with Library(path, encoder=load_encoder(encoder)) as lib:
        if size:
            texts = ["When a ratio and a total are given, divide the total by the sum of the ratio's parts"]
            texts += [LESSON_TEMPLATES[i % len(LESSON_TEMPLATES)].format(f"case {i}") for i in range(size - 1)]
            lib.add_vectors([Experience(t, "bench") for t in texts], lib.encoder.encode(texts))
        return lib.profile.encoder_id


def run(n: int = 200, lessons: int = 1000, encoder: str = "default", out: Path | None = None) -> dict:
    import openai

    question = "The ratio of boys to girls in a class is 3:5 and there are 40 pupils. How many girls are there?"
    rows = []
    up_port = free_port()
    upstream_cmd = ["-c", "import uvicorn; from dsonet.bench.proxy import scripted_upstream; "
                          f"uvicorn.run(scripted_upstream(), host='127.0.0.1', port={up_port}, log_level='warning')"]
    with tempfile.TemporaryDirectory() as tmp, Process(upstream_cmd, up_port, "/v1/models") as upstream:
        direct = openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="x", max_retries=0)
        for size in (0, lessons):
            db = Path(tmp) / f"lib{size}.sqlite"
            encoder_id = _build_library(db, size, encoder)
            port = free_port()
            proxy_cmd = ["-m", "dsonet.cli.main", "proxy", "--upstream", f"{upstream.url}/v1", "--db", str(db),
                         "--encoder", encoder, "--port", str(port), "--min-similarity", "0.3"]
            with Process(proxy_cmd, port, "/health") as proxy:
                via = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0)
                _timed(via, 5, question), _timed(direct, 5, question)  # warm both paths (encoder, connections)
                base, through = [], []
                for _ in range(max(1, n // 10)):  # interleaved blocks: both paths see the same machine load
                    base += _timed(direct, 10, question)
                    through += _timed(via, 10, question)
                injected = via.chat.completions.with_raw_response.create(
                    model="scripted", messages=[{"role": "user", "content": question}]).headers.get("x-dso-lessons")
            b, t = np.array(base), np.array(through)
            rows.append({"library": size, "n": len(t), "encoder": encoder_id,
                         "direct_p50_ms": round(float(np.median(b)), 2), "direct_p99_ms": round(float(np.percentile(b, 99)), 2),
                         "proxy_p50_ms": round(float(np.median(t)), 2), "proxy_p99_ms": round(float(np.percentile(t, 99)), 2),
                         "added_p50_ms": round(float(np.median(t) - np.median(b)), 2),
                         "added_p99_ms": round(float(np.percentile(t, 99) - np.percentile(b, 99)), 2),
                         "lessons_injected": len(injected.split(",")) if injected else 0})
    result = {"benchmark": "proxy", "rows": rows, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "load_average_1min": round(os.getloadavg()[0], 2),
              "note": "the upstream, `dso proxy` and the client are three processes on this machine; the upstream "
                      "answers at once; added = proxy minus direct, same client, interleaved blocks of 10"}
    out = out or RESULTS / "proxy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


@click.command()
@click.option("-n", "n", default=200, show_default=True, help="Requests per path and library.")
@click.option("--lessons", default=1000, show_default=True, help="Library size of the second row.")
@click.option("--encoder", default="default", show_default=True, help="Encoder spec of the library.")
@click.option("--quick", is_flag=True, help="n = 40, 100 lessons; writes proxy-quick.json.")
def cli(n: int, lessons: int, encoder: str, quick: bool) -> None:
    """Latency the proxy adds to a chat completion (p50, p99), empty library and a library of lessons.

    \b
    Example:
      dso bench proxy --quick
    """
    if quick:
        n, lessons = 40, 100
    result = run(n, lessons, encoder, RESULTS / ("proxy-quick.json" if quick else "proxy.json"))
    click.echo(f"{'library':>8} {'direct p50':>11} {'proxy p50':>10} {'added p50':>10} {'added p99':>10} {'injected':>9}")
    for r in result["rows"]:
        click.echo(f"{r['library']:>8} {r['direct_p50_ms']:>9.2f}ms {r['proxy_p50_ms']:>8.2f}ms "
                   f"{r['added_p50_ms']:>8.2f}ms {r['added_p99_ms']:>8.2f}ms {r['lessons_injected']:>9}")
