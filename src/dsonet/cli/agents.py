"""`dso mcp` and `dso proxy`: where agents plug in (MCP hosts, and anything that speaks the OpenAI API)."""

from __future__ import annotations

from pathlib import Path

import click

from dsonet.cli.options import (db_option, db_path, environment, environment_options, k_option, min_similarity_option,
                                node_option, node_token_option, probed, tag_option, token_option)
from dsonet.errors import DsoError

encoder_option = click.option("--encoder", default="default", show_default=True,
                              help="Encoder spec for a local library (default, minilm, wordllama, st:NAME, hf:NAME, "
                                   "zen:DIR); it must match the library's profile.")
host_option = click.option("--host", default="127.0.0.1", show_default=True,
                           help="Address to listen on; beyond loopback needs --token.")
max_body_option = click.option("--max-body", type=click.IntRange(1024), default=1024 * 1024, show_default=True,
                               help="Largest request body in bytes (larger: 413).")


def _http_url(_ctx, param, value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"{value!r} is not an http(s) URL, e.g. http://localhost:8000/v1", param=param)
    return value


def _memory(db: Path | None, node: str | None, node_token: str | None, encoder: str, timeout: float,
            create: bool = True):
    from dsonet.memory import open_memory

    return open_memory(None if node else db_path(db), node, node_token, encoder, timeout, create)


@click.command()
@db_option
@node_option
@node_token_option
@encoder_option
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio: launched by a desktop host; http: streamable HTTP at http://HOST:PORT/mcp.")
@host_option
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port (http).")
@token_option
@max_body_option
@click.option("--timeout", type=click.FloatRange(0.1), default=30.0, show_default=True,
              help="Seconds per request to the node (--node); idle HTTP sessions close after 60x this.")
@k_option()
@min_similarity_option
@click.option("--allow-delete", is_flag=True,
              help="Add the delete tool: an agent may delete lessons this node (or this file) wrote, never peers'.")
@tag_option("A scope the add tool gives every lesson, e.g. agent:reviewer (repeatable; the agent may send others).")
@click.option("--search-tag", "search_tags", multiple=True, metavar="TAG",
              help="A scope the search tool keeps to by default, e.g. project:billing (repeatable).")
@environment_options
def mcp(db, node, node_token, encoder, transport, host, port, token, max_body, timeout, k, min_similarity,
        allow_delete, tags, search_tags, scope, python) -> None:
    """Serve the library as MCP tools (search, add, list, record_outcome, stats; delete with
    --allow-delete) for Claude Desktop, Cursor or any MCP host, over stdio or streamable HTTP.
    -k and --min-similarity are the search tool's defaults.

    \b
    Examples:
      dso mcp --db ~/.dsonet/library.sqlite                         stdio (what a desktop host launches)
      dso mcp --node http://127.0.0.1:8080 --node-token $NODE_TOKEN   a running node's library
      dso mcp --transport http --port 8765 --token $T               http://127.0.0.1:8765/mcp
      dso mcp --python .venv/bin/python                             search in that interpreter's environment
    """
    from dsonet.asgi import check_exposure

    try:
        env = environment(scope, python)
        if transport == "http":
            check_exposure(host, token)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from None
    from dsonet.asgi import Limits, bind, serve

    sock = bind(host, port) if transport == "http" else None  # a busy port: exit 3 before the encoder loads
    try:
        memory = _memory(db, node, node_token, encoder, timeout)
    except DsoError as exc:
        if sock is not None:
            sock.close()
        raise click.ClickException(str(exc)) from None
    from dsonet.mcp.server import build_server, http_app, warm_up

    server = build_server(memory, k=k, min_similarity=min_similarity, allow_delete=allow_delete, add_tags=tags,
                          search_tags=search_tags, environment=env)
    try:
        warm_up(memory)  # the encoder loads now, not on the first search
        if transport == "stdio":
            server.run("stdio")
        else:
            app = http_app(server, token, max_body, idle_timeout_s=60 * timeout)
            serve(app, host, port, "dso mcp", "/mcp", Limits(keep_alive_s=timeout), sock=sock)
    finally:
        memory.close()


@click.command()
@click.option("--upstream", required=True, metavar="URL", envvar="DSONET_UPSTREAM", callback=_http_url,
              help="OpenAI-compatible base URL to forward to, e.g. http://localhost:8000/v1 (env DSONET_UPSTREAM).")
@click.option("--upstream-key", envvar="DSONET_UPSTREAM_KEY", default=None,
              help="API key for the upstream (env DSONET_UPSTREAM_KEY); without --token the client's own key "
                   "is passed through instead.")
@db_option
@node_option
@node_token_option
@encoder_option
@host_option
@click.option("--port", type=click.IntRange(1, 65535), default=8787, show_default=True)
@token_option
@max_body_option
@click.option("--timeout", type=click.FloatRange(0.1), default=300.0, show_default=True,
              help="Seconds to wait for the upstream (and the node, with --node).")
@k_option()
@min_similarity_option
@click.option("--learn/--no-learn", default=False, show_default=True,
              help="Learn from the traffic: an agent's failed code, its error line and the code that then ran "
                   "become a lesson (on probation) in the library, and the results of the code answered with "
                   "lessons become their outcomes. Off by default: with --node, what your agents hit is "
                   "published to the fleet.")
@click.option("--reflect/--no-reflect", default=False, show_default=True,
              help="With --learn: an episode whose error line names no fix (a wrong value, a workaround written "
                   "by hand) is put to the upstream model, in the background, and the lesson of its reply kept on "
                   "probation. Costs one upstream call of at most 96 tokens per such episode.")
@click.option("--pair-runs/--no-pair-runs", default=True, show_default=True,
              help="With --learn: a run's failed code is also set beside another run's code that ran for the same "
                   "kind of task (their texts' MiniLM embeddings, variables and numbers written alike, at cosine "
                   ">= 0.93), where the error line and that code spell out a rule lesson whose replacement keeps "
                   "part of the refused name (np.trapz -> np.trapezoid). The runs stay in this proxy; only the "
                   "lesson is stored.")
@tag_option("Inject only lessons carrying this scope, e.g. project:billing (repeatable: every one).")
@environment_options
def proxy(upstream, upstream_key, db, node, node_token, encoder, host, port, token, max_body, timeout, k,
          min_similarity, learn, reflect, pair_runs, tags, scope, python) -> None:
    """Serve an OpenAI-compatible API (/v1/chat/completions, /v1/responses; streaming or not) that
    puts the library's lessons for the last user message into the system message and forwards to
    UPSTREAM. Each answer names the lessons (X-DSO-Lessons) and its retrieval (X-DSO-Retrieval-Id);
    POST /v1/outcomes {"retrieval_id", "helped"} records whether they helped. Every other /v1 route
    (models, embeddings, completions...) goes to UPSTREAM unchanged.

    \b
    Examples:
      dso proxy --upstream http://localhost:8000/v1 --db ~/.dsonet/library.sqlite
      dso proxy --upstream http://127.0.0.1:8000/v1 --learn      lessons from the agents' own errors and fixes
      dso proxy --upstream http://127.0.0.1:8000/v1 --learn --reflect   ... and the model's own, where errors name none
      OPENAI_BASE_URL=http://127.0.0.1:8787/v1 python my_agent.py
      dso proxy --upstream https://api.openai.com/v1 --upstream-key $OPENAI_API_KEY --token $T --host 0.0.0.0
      dso proxy --upstream http://127.0.0.1:8000/v1 --python .venv/bin/python   lessons that hold there only
    """
    from dsonet.asgi import check_exposure

    if reflect and not learn:
        raise click.UsageError("--reflect reflects on what --learn finds: give --learn too")
    try:
        here = probed(scope, python)  # what the agents run: their searches' environment, their lessons' scope
        check_exposure(host, token)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from None
    from dsonet.asgi import Limits, bind, serve

    sock = bind(host, port)  # a busy port: exit 3 before the encoder loads
    try:
        # it only reads lessons, unless it learns them from the traffic
        memory = _memory(db, node, node_token, encoder, timeout, create=learn)
    except DsoError as exc:
        sock.close()
        raise click.ClickException(str(exc)) from None
    from dsonet.proxy.app import create_app
    from dsonet.proxy.learning import TrafficLearner

    learner = None
    if learn:
        from dsonet.encoders.minilm_numpy import numpy_minilm
        from dsonet.learn.pairing import Pairing

        learner = TrafficLearner(memory, environment=here, pairing=Pairing(numpy_minilm().encode) if pair_runs else None)
    app = create_app(memory, upstream, upstream_key=upstream_key, token=token, max_body=max_body, timeout_s=timeout,
                     k=k, min_similarity=min_similarity, tags=tags, learner=learner, reflect=reflect,
                     environment=None if here is None else here.environment)
    try:
        # the encoder loads at start, then the line says it is ready; each request in flight holds a
        # second descriptor (its upstream connection), so the connection cap leaves room for those
        serve(app, host, port, "dso proxy", "/v1", Limits(fds_per_connection=2), sock=sock)
    finally:
        memory.close()
