"""`dso llm serve`: the embedded model behind an OpenAI-compatible endpoint (`dsonet.serve`)."""

from __future__ import annotations

import click

from dsonet.cli.agents import host_option
from dsonet.cli.options import token_option
from dsonet.errors import DsoError
from dsonet.learn.llama_llm import DEFAULT_MODEL, MODELS, N_CTX, SLOTS


@click.group()
def llm() -> None:
    """The embedded LLM (Qwen2.5-Coder-Instruct run in-process by llama.cpp), for agents and tools.

    \b
    Example:
      dso llm serve && dso proxy --upstream http://127.0.0.1:8000/v1
    """


@llm.command()
@click.option("--model", type=click.Choice(sorted(MODELS)), default=DEFAULT_MODEL, show_default=True,
              help="Embedded model to serve; clients name it so (or by its file's name).")
@host_option
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--slots", type=click.IntRange(1, 64), default=SLOTS, show_default=True,
              help="Sequences decoded together, each with its own prompt cache of --n-ctx tokens (memory grows "
                   "with both); more wait for a free slot.")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="llama.cpp threads; default half the cores (env DSONET_LLM_THREADS). More than the free cores "
                   "is slower: its threads busy-wait for each other.")
@click.option("--n-ctx", type=click.IntRange(256), default=N_CTX, show_default=True,
              help="Tokens of prompt + answer one sequence may hold; longer prompts get a 400 that says so.")
@token_option
@click.option("--max-body", type=click.IntRange(1024), default=4 * 1024 * 1024, show_default=True,
              help="Largest request body in bytes (larger: 413).")
def serve(model: str, host: str, port: int, slots: int, threads: int | None, n_ctx: int, token: str | None,
          max_body: int) -> None:
    """Serve the embedded model as an OpenAI-compatible API, offline: POST /v1/chat/completions
    (streaming or not; tools and tool_choice, in the model's own chat template; a grammar forces a
    valid call when tool_choice is "required" or names a function), GET /v1/models, GET /health.
    Prints `dso llm serve listening on URL` once the model is loaded; Ctrl-C or SIGTERM stops it.

    \b
    Examples:
      dso llm serve                                             http://127.0.0.1:8000/v1, the 0.5B
      dso llm serve --model qwen2.5-coder-1.5b --slots 4 --port 8001
      dso proxy --upstream http://127.0.0.1:8000/v1             lessons injected in front of it
      OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=none python my_agent.py
    """
    from dsonet.asgi import check_exposure, serve as serve_app

    try:
        # before the imports below: a refused exposure is said even where the learn extra is missing
        check_exposure(host, token)
        from dsonet.learn.llama_llm import LlamaCppLLM, gguf_path
        from dsonet.serve import ServedModel, create_app

        loaded = LlamaCppLLM(gguf_path(model), MODELS[model].name, threads, n_ctx=n_ctx, slots=slots)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from None
    app = create_app(ServedModel.of(loaded, model), token=token, max_body=max_body)
    # a stream still decoding when the signal comes is cut after 5 s: the model cannot be interrupted sooner
    serve_app(app, host, port, "dso llm serve", "/v1", timeout_graceful_shutdown=5)
