"""`dso add | search | show | delete | export | import | stats`: the local experience library.

Every command opens the library at --db (default $DSONET_DB, else ~/.dsonet/library.sqlite),
makes one call of the Python API (`dsonet.library`) and prints the result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from dsonet.errors import DsoError


def _default_db() -> Path:
    return Path(os.environ.get("DSONET_DB", "~/.dsonet/library.sqlite")).expanduser()


db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Library file (default: $DSONET_DB or ~/.dsonet/library.sqlite).")


def _open(db: Path | None):
    from dsonet.library import Library

    try:
        return Library(db or _default_db())
    except DsoError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@click.argument("text")
@click.option("--domain", default="general", show_default=True, help="Dotted tag, e.g. math.geometry.")
@click.option("--confidence", type=float, default=0.5, show_default=True)
@db_option
def add(text: str, domain: str, confidence: float, db: Path | None) -> None:
    """Add one experience (encoded with the default encoder).

    \b
    Example:
      dso add "When a ratio is given, write both parts as multiples of one unknown" --domain math.ratio
    """
    with _open(db) as lib:
        try:
            exp = lib.add(text, domain=domain, confidence=confidence)
        except DsoError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(exp.id)


@click.command()
@click.argument("query")
@click.option("-k", default=5, show_default=True, help="How many experiences.")
@click.option("--min-similarity", type=float, default=0.6, show_default=True)
@click.option("--max-tokens", type=int, default=2048, show_default=True)
@click.option("--domain", default=None, help="Only this domain.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hit.")
@db_option
def search(query: str, k: int, min_similarity: float, max_tokens: int, domain: str | None, as_json: bool,
           db: Path | None) -> None:
    """Find the experiences nearest to QUERY (scored over compressed codes, rescored exactly where possible).

    \b
    Example:
      dso search "A train travels 120 km in 2 hours; how fast?" -k 3 --min-similarity 0.3
    """
    with _open(db) as lib:
        hits = lib.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens, domain=domain)
        for h in hits:
            if as_json:
                click.echo(json.dumps({"score": round(h.score, 4), "members": list(h.members), **h.experience.to_dict()}))
            else:
                click.echo(f"{h.score:.3f}  {h.experience.id[:12]}  [{h.experience.domain}]  {h.experience.text}")


@click.command()
@click.argument("exp_id")
@db_option
def show(exp_id: str, db: Path | None) -> None:
    """Print one experience as JSON (an id prefix of 8+ characters will do).

    \b
    Example:
      dso show 3f2a9c0b
    """
    with _open(db) as lib:
        exp = lib.get(_resolve(lib, exp_id))
        click.echo(json.dumps(exp.to_dict(), indent=2))


@click.command()
@click.argument("exp_id")
@db_option
def delete(exp_id: str, db: Path | None) -> None:
    """Delete an experience: a tombstone that replicates to other nodes.

    \b
    Example:
      dso delete 3f2a9c0b
    """
    with _open(db) as lib:
        full = _resolve(lib, exp_id)
        lib.delete(full)
        click.echo(f"deleted {full}")


def _resolve(lib, prefix: str) -> str:
    if len(prefix) < 8:
        raise click.ClickException(f"id {prefix!r}: give at least 8 characters of the id")
    found = [r[0] for r in lib.db.execute("SELECT id FROM experiences WHERE id LIKE ? LIMIT 2", (prefix + "%",))]
    if len(found) != 1:
        raise click.ClickException(f"id {prefix!r}: " + ("no such experience" if not found else "ambiguous; give more characters"))
    return found[0]


@click.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "msgpack", "json"]), default="jsonl", show_default=True)
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=Path("~/.dsonet/node.key"),
              show_default=True, help="Node key that signs batch files (msgpack/json).")
@db_option
def export_cmd(path: Path, fmt: str, key: Path, db: Path | None) -> None:
    """Write the library to PATH: JSONL, or signed CompressedBatch files (msgpack or JSON).

    \b
    Examples:
      dso export lib.jsonl
      dso export lib.msgpack --format msgpack --key ./node.key
    """
    from dsonet.library.transfer import export

    identity = None
    if fmt != "jsonl":
        from dsonet.identity import NodeIdentity

        identity = NodeIdentity.load(key.expanduser())
    with _open(db) as lib:
        for p in export(lib, path, fmt, identity):
            click.echo(f"wrote {p}")


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option("--encode-texts", is_flag=True,
              help="Encode the texts of CompressedBatch files too and keep the floats: exact search over them, "
                   "for the encoder's time and 30 KB a row on disk. (JSONL files carry their floats already.)")
def import_cmd(paths: tuple[Path, ...], db: Path | None, encode_texts: bool) -> None:
    """Read JSONL or CompressedBatch files (hash and signature verified) into the library.

    \b
    Examples:
      dso import peer.msgpack lib.jsonl
      dso import --encode-texts peer.msgpack
    """
    from dsonet.library.transfer import import_file

    with _open(db) as lib:
        for p in paths:
            try:
                click.echo(f"{p}: {import_file(lib, p, encode_texts)} added")
            except DsoError as exc:
                raise click.ClickException(f"{p}: {exc}") from None


@click.command()
@db_option
def stats(db: Path | None) -> None:
    """Counts, domains, sizes and the profile of the library, as JSON.

    \b
    Example:
      dso stats --db ./lib.sqlite
    """
    with _open(db) as lib:
        click.echo(json.dumps(lib.stats(), indent=2))
