"""The options every command shares: one flag per concept, one environment prefix (DSONET_).

    --db PATH     the library file        DSONET_DB     (default ~/.dsonet/library.sqlite)
    --node URL    a running node's API    DSONET_NODE   (add/search/list/show/stats/mcp/proxy talk to it instead)
    --node-token  the node's API token    DSONET_NODE_TOKEN
    --token T     the token a server demands of its clients   DSONET_TOKEN  (node start, mcp, proxy)
    --tag TAG     a scope (agent:NAME, project:NAME), repeatable: set on add, filtered in search, mcp, proxy
    --scope PIN   name==version, repeatable: where a lesson holds (add), the asker's environment (search, ask)
    --python PATH the asker's environment read from an interpreter (search, ask; learn's sandbox)
    -k N          how many results
    --min-similarity X   relevance threshold   DSONET_MIN_SIMILARITY  (default: the space's calibrated one)
    --json        machine-readable output

Environment variables are declared on each option (click's auto_envvar_prefix would derive
per-command names such as DSONET_SEARCH_DB).
"""

from __future__ import annotations

from pathlib import Path

import click

from dsonet.library.policy import ENV_MIN_SIMILARITY, MAX_TOKENS, K
from dsonet.scope import MAX_ENVIRONMENT_PINS, Probe, Scope, probe

HOME = Path("~/.dsonet")  # one home: keygen's key, node start's data dir and the library all live here
DEFAULT_DB = HOME / "library.sqlite"
DEFAULT_KEY = HOME / "node.key"


def db_path(db: Path | None) -> Path:
    return (db or DEFAULT_DB).expanduser()


db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), envvar="DSONET_DB", default=None,
                         help=f"Library file (env DSONET_DB; default {DEFAULT_DB}).")
node_option = click.option("--node", metavar="URL", envvar="DSONET_NODE", default=None,
                           help="Talk to a running node's API instead of a local file (env DSONET_NODE), "
                                "e.g. http://127.0.0.1:8080.")
node_token_option = click.option("--node-token", envvar="DSONET_NODE_TOKEN", default=None,
                                 help="The node's API token, with --node (env DSONET_NODE_TOKEN).")
token_option = click.option("--token", envvar="DSONET_TOKEN", default=None,
                            help="Bearer token clients must send (env DSONET_TOKEN); required beyond loopback.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
# None reaches the library, which applies its space's calibrated threshold (`default_min_similarity`)
min_similarity_option = click.option(
    "--min-similarity", type=click.FloatRange(-1, 1), envvar=ENV_MIN_SIMILARITY, default=None,
    help=f"Only experiences at least this similar (cosine); default: the threshold `dso bench relevance` "
         f"calibrated for the library's space (the protocol's 0.6 for a space never calibrated). "
         f"Env {ENV_MIN_SIMILARITY}.")
max_tokens_option = click.option("--max-tokens", type=click.IntRange(1), default=MAX_TOKENS, show_default=True,
                                 help="Token budget of the returned experiences' text.")


def tag_option(help: str):
    """--tag, repeatable: scopes such as agent:NAME and project:NAME (`dsonet.library.store.tags`)."""
    return click.option("--tag", "tags", multiple=True, metavar="TAG", help=help)


def scope_option(help: str):
    """--scope, repeatable: pins ``name==version`` (`dsonet.scope`)."""
    return click.option("--scope", "scope", multiple=True, metavar="PIN", help=help)


def environment_options(fn):
    """--scope and --python for a query: the asker's environment (`environment`)."""
    fn = click.option("--python", "python", default=None, metavar="PATH",
                      help="The asker's environment is this interpreter's: its Python and every distribution "
                           "installed; lessons whose scope contradicts it are held back.")(fn)
    return scope_option("A pin of the asker's environment, e.g. numpy==1.26.4 (repeat it; beside --python, "
                        "these win); lessons whose scope contradicts it are held back.")(fn)


def environment(scope: tuple[str, ...], python: str | None) -> Scope | None:
    """The asker's environment from --python and --scope (its pins over the interpreter's); None for neither."""
    found = probed(scope, python)
    return None if found is None else found.environment


def probed(scope: tuple[str, ...], python: str | None) -> Probe | None:
    """`environment` with the interpreter's modules (which distribution each comes from), to scope a
    lesson learned there; None for neither option."""
    if not scope and python is None:
        return None
    found = probe(python) if python else Probe(Scope())
    pins = dict(found.environment.pins) | dict(Scope.parse(scope, limit=MAX_ENVIRONMENT_PINS).pins)
    return Probe(Scope(tuple(sorted(pins.items()))), found.modules)


def k_option(default: int = K):
    return click.option("-k", "k", type=click.IntRange(1, 1000), default=default, show_default=True,
                        help="How many results at most.")
