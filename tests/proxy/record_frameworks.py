"""How tests/proxy/fixtures/<framework>-*.json were recorded: real agent frameworks, unmodified, run
against `dso proxy --learn` in front of `dso llm serve`, with a recorder in front of the proxy that
writes down each request body the proxy received and the answer it gave back (the proxy is not
changed for this). Not a test: running the model takes minutes a run on a CPU.

    dso llm serve --port 8000 --threads 1 &
    dso proxy --upstream http://127.0.0.1:8000/v1 --learn --db /tmp/fw/lib.sqlite &       # on :8787
    python tests/proxy/record_frameworks.py recorder --to http://127.0.0.1:8787 --port 8788 --out run.jsonl &
    python tests/proxy/record_frameworks.py smolagents --base-url http://127.0.0.1:8788/v1 --task "..."
    python tests/proxy/record_frameworks.py agents --base-url http://127.0.0.1:8788/v1 --task "..."
    python tests/proxy/record_frameworks.py fixture run.jsonl tests/proxy/fixtures/smolagents-trapz.json --meta '{...}'
"""

import argparse
import json
import subprocess
import sys

DSO_HEADERS = ("x-dso-lessons", "x-dso-retrieval-id", "x-dso-threshold", "x-dso-best-score")


def recorder(to: str, port: int, out: str) -> None:
    """A pass-through to ``to`` that appends {path, request, status, headers, response} per call to ``out``."""
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(timeout=900)

    async def relay(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        reply = await client.request(request.method, f"{to}{request.url.path}", content=body, headers=headers)
        with open(out, "a") as f:
            f.write(json.dumps({"path": request.url.path, "request": json.loads(body) if body else None,
                                "status": reply.status_code,
                                "headers": {h: reply.headers[h] for h in DSO_HEADERS if h in reply.headers},
                                "response": reply.json() if "json" in reply.headers.get("content-type", "") else reply.text})
                    + "\n")
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in ("content-length", "content-encoding")}
        return Response(reply.content, status_code=reply.status_code, headers=kept)

    app = Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def run_smolagents(base_url: str, model_id: str, task: str, steps: int, max_tokens: int) -> None:
    from smolagents import CodeAgent, OpenAIServerModel

    model = OpenAIServerModel(model_id=model_id, api_base=base_url, api_key="none", max_tokens=max_tokens)
    agent = CodeAgent(tools=[], model=model, additional_authorized_imports=["numpy"], max_steps=steps)
    print("final answer:", agent.run(task))


def run_agents_sdk(base_url: str, model_id: str, task: str, steps: int, max_tokens: int) -> None:
    import os

    os.environ["OPENAI_BASE_URL"] = base_url  # the only setting: the SDK's own client reads it
    os.environ.setdefault("OPENAI_API_KEY", "none")
    from agents import Agent, MaxTurnsExceeded, ModelSettings, Runner, function_tool, set_default_openai_api, set_tracing_disabled

    set_default_openai_api("chat_completions")  # `dso llm serve` has no Responses API
    set_tracing_disabled(True)  # traces would go to api.openai.com

    @function_tool
    def run_python(code: str) -> str:
        """Run a Python program and return what it printed (stdout and stderr)."""
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "TimeoutError: the program ran for more than 60 s"
        return (p.stdout + p.stderr)[-2000:] or "(no output)"

    # a call on every turn, as a coding agent's loop makes it: unforced, the 1.5B wrote its first call as a
    # json fence with a """ string (no call), and after an error it told the user the fix instead of running it
    agent = Agent(name="coder", model=model_id, tools=[run_python], reset_tool_choice=False,
                  model_settings=ModelSettings(max_tokens=max_tokens, tool_choice="required"),
                  instructions="You solve tasks by writing Python and running it with the run_python tool. "
                               "Read the output; if it failed, fix the code and run it again.")
    try:
        print("final answer:", Runner.run_sync(agent, task, max_turns=steps).final_output)
    except MaxTurnsExceeded as exc:  # the end of a forced loop: every call's result went out with the next request
        print("stopped:", exc)


def fixture(jsonl: str, out: str, meta: dict) -> None:
    """The recorded calls of one run as a fixture: the chat completions only, in order, with ``meta``."""
    with open(jsonl) as f:
        calls = [json.loads(line) for line in f if line.strip()]
    calls = [c for c in calls if c["path"].endswith("/chat/completions")]
    with open(out, "w") as f:
        json.dump(meta | {"calls": calls}, f, indent=1)
        f.write("\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recorder")
    r.add_argument("--to", required=True)
    r.add_argument("--port", type=int, default=8788)
    r.add_argument("--out", required=True)
    for name in ("smolagents", "agents"):
        a = sub.add_parser(name)
        a.add_argument("--base-url", required=True)
        a.add_argument("--model", default="qwen2.5-coder-0.5b")
        a.add_argument("--task", required=True)
        a.add_argument("--steps", type=int, default=4)
        a.add_argument("--max-tokens", type=int, default=300)
    f = sub.add_parser("fixture")
    f.add_argument("jsonl")
    f.add_argument("out")
    f.add_argument("--meta", type=json.loads, default={})
    args = p.parse_args()
    if args.cmd == "recorder":
        recorder(args.to, args.port, args.out)
    elif args.cmd == "fixture":
        fixture(args.jsonl, args.out, args.meta)
    else:
        run = run_smolagents if args.cmd == "smolagents" else run_agents_sdk
        run(args.base_url, args.model, args.task, args.steps, args.max_tokens)


if __name__ == "__main__":
    main()
