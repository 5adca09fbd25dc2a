"""The OpenAI-compatible back end against a small HTTP server on localhost. The subject is the
client's behaviour (concurrency cap, retries, n top-up, token accounting), so the server only
answers the chat-completions route the way llama.cpp's server does: one choice per request."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dsonet.learn.chat import LLMError, user
from dsonet.learn.llm import open_llm


class _Server:
    def __init__(self, fail_first: int = 0, delay: float = 0.05, always_fail: bool = False, reply=None,
                 gather: int = 0):
        """``gather``: a request waits (up to 5 s) until that many are in flight, so that a client that
        sends them together is seen to, however slowly a loaded machine schedules their threads."""
        self.lock = threading.Condition()
        self.in_flight = self.peak = self.requests = 0
        self.fail_left = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests += 1
                    outer.in_flight += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                    fail = always_fail or outer.fail_left > 0
                    outer.fail_left -= 1
                    outer.lock.notify_all()
                    outer.lock.wait_for(lambda: outer.in_flight >= gather, timeout=5)
                time.sleep(delay)
                with outer.lock:
                    outer.in_flight -= 1
                if fail:
                    self.send_response(503)
                    self.end_headers()
                    return
                question = body["messages"][-1]["content"]
                payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant",
                                                    "content": reply(question) if reply else f"echo: {question}"}}],
                           "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server(request):
    s = _Server(**getattr(request, "param", {}))
    yield s
    s.close()


@pytest.mark.parametrize("server", [{"gather": 3}], indirect=True)
def test_requests_run_concurrently_up_to_the_limit_and_keep_order(server):
    llm = open_llm(server.url, "tiny", max_concurrency=3)
    out = llm.generate([user(f"q{i}") for i in range(9)], n=1, temperature=0)
    assert [c.texts for c in out] == [(f"echo: q{i}",) for i in range(9)]
    assert server.peak == 3


def test_servers_answering_one_choice_are_topped_up_to_n_samples(server):
    out = open_llm(server.url, "tiny").generate([user("q")], n=4, temperature=0.7, seed=1)
    assert len(out[0].texts) == 4 and server.requests == 4
    assert out[0].prompt_tokens == 7 and out[0].completion_tokens == 12


@pytest.mark.parametrize("server", [{"fail_first": 2}], indirect=True)
def test_transient_server_errors_are_retried(server):
    out = open_llm(server.url, "tiny", max_retries=3).generate([user("q")], n=1)
    assert out[0].texts == ("echo: q",) and server.requests == 3


@pytest.mark.parametrize("server", [{"always_fail": True}], indirect=True)
def test_a_dead_server_raises_a_named_error_after_retries(server):
    with pytest.raises(LLMError, match="failed after retries"):
        open_llm(server.url, "tiny", max_retries=1).generate([user("q")], n=1)
    assert server.requests == 2


def test_a_server_without_a_model_name_is_refused():
    with pytest.raises(LLMError, match="--model"):
        open_llm("http://127.0.0.1:9/v1", None)
