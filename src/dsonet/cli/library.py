"""`dso add | search | list | show | edit | delete | export | import | stats`: the experience library.

Every command opens the library at --db (env DSONET_DB, default ~/.dsonet/library.sqlite), or
with --node URL talks to a running node's API instead (add, search, show, delete, stats); it
makes one call of the Python API (`dsonet.library`, `dsonet.network.client`) and prints the
result, as text or, with --json, as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click

from dsonet.cli.options import (DEFAULT_KEY, db_option, db_path, environment, environment_options, json_option,
                                k_option, max_tokens_option, min_similarity_option, node_option, node_token_option,
                                scope_option, tag_option)
from dsonet.errors import DsoError
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.library.errors import LibraryError
from dsonet.library.policy import ENV_MIN_SIMILARITY
from dsonet.library.transfer import export, import_file
from dsonet.scope import Scope


@contextmanager
def _store(db: Path | None, node: str | None = None, node_token: str | None = None, create: bool = False):
    """The library file, or a node's API (`NodeClient` has the library's add/get/delete/search/stats).
    ``create``: only the commands that write (add, import) make a library where there is none."""
    if node:
        from dsonet.network.client import NodeClient  # httpx: 0.3 s that the file's commands never need

        store = NodeClient(node, token=node_token)
    else:
        store = Library(db_path(db), create=create)
    try:
        yield store
    finally:
        store.close()


def _echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.command()
@click.argument("text")
@click.option("--domain", default="general", show_default=True, help="Dotted tag, e.g. math.geometry.")
@click.option("--confidence", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@tag_option("A scope for the lesson, e.g. agent:reviewer or project:billing (repeat it for more); this "
            "library's own, never sent to peers.")
@scope_option("Where the lesson holds, a pin name==version of a package it names or of python, e.g. "
              "numpy==2.4.6 (repeat it); signed with the lesson. None: it holds everywhere.")
@db_option
@node_option
@node_token_option
@json_option
def add(text: str, domain: str, confidence: float, tags: tuple[str, ...], scope: tuple[str, ...], db: Path | None,
        node: str | None, node_token: str | None, as_json: bool) -> None:
    """Add one experience (encoded with the library's encoder) and print its id. TEXT "-" reads it
    from standard input. A lesson needs at least three words: a condition and what to do.

    \b
    Examples:
      dso add "When a ratio is given, write both parts as multiples of one unknown" --domain math.ratio
      dso add "When a graph is sparse, store it as adjacency lists" --node http://127.0.0.1:8080
      echo "When pip reinstalls every package, copy requirements.txt first" | dso add - --domain ops
      dso add "When a migration locks a table, add the index concurrently" --tag project:billing --tag agent:dba
      dso add "When integrating samples, use np.trapezoid(z, x), not np.trapz" --scope numpy==2.4.6
    """
    if text == "-":
        text = sys.stdin.read()
    pins = Scope.parse(scope)  # a bad pin stores nothing, and makes no file
    with _store(db, node, node_token, create=True) as store:
        exp = store.add(text, domain=domain, confidence=confidence, tags=tags, scope=pins)
    _echo_json(exp.to_dict()) if as_json else click.echo(exp.id)


@click.command()
@click.argument("query")
@k_option()
@min_similarity_option
@max_tokens_option
@click.option("--domain", default=None, help="Only this domain.")
@tag_option("Only lessons carrying this tag, e.g. project:billing (repeat it: lessons carrying every one).")
@environment_options
@db_option
@node_option
@node_token_option
@json_option
def search(query: str, k: int, min_similarity: float | None, max_tokens: int, domain: str | None,
           tags: tuple[str, ...], scope: tuple[str, ...], python: str | None, db: Path | None, node: str | None,
           node_token: str | None, as_json: bool) -> None:
    """Find the experiences nearest to QUERY (scored over compressed codes, rescored exactly where
    possible) at or above the relevance threshold. With none above it, stdout stays empty (--json:
    zero lines) and one line on stderr gives the threshold and the closest score.

    \b
    Examples:
      dso search "A train travels 120 km in 2 hours; how fast?" -k 3
      dso search "sparse graphs" --node http://127.0.0.1:8080 --json --min-similarity 0.3
      dso search "slow migration" --tag project:billing
      dso search "integrate samples with numpy" --python .venv/bin/python
      dso search "integrate samples with numpy" --scope numpy==1.26.4
    """
    env = environment(scope, python)
    with _store(db, node, node_token) as store:
        hits = store.search(query, k=k, min_similarity=min_similarity, max_tokens=max_tokens, domain=domain,
                            tags=tags, environment=env)
    for h in hits:  # --json: JSON Lines, one object per hit
        if as_json:
            click.echo(json.dumps(h.to_json()))
        else:
            click.echo(f"{h.score:.3f}  {h.experience.id[:12]}  [{h.experience.domain}]  {h.experience.text}"
                       + scope_note(h.experience.scope, h.fit))
    for b in hits.held_back:  # on stderr: what an agent must not be shown, said to the person asking
        click.echo(f"held back {b.id[:12]}: {b.reason}  {b.text}", err=True)
    if not hits:
        click.echo(empty_answer(hits.threshold, hits.best_score, len(hits.held_back)), err=True)


def scope_note(scope: Scope, fit: str) -> str:
    """A hit's scope and fit, after its text: '  (numpy==2.4.6; fits)'."""
    said = ", ".join(scope.strings()) if scope else ""
    return f"  ({'; '.join(x for x in (said, fit) if x)})" if said or fit else ""


def empty_answer(threshold: float | None, best_score: float | None, held_back: int = 0) -> str:
    """Why a search returned nothing, quoting no lesson: the threshold and the closest score (a node
    older than these fields reports neither), or the lessons held back for their scope."""
    above = "the threshold" if threshold is None else f"{threshold:.3f}"
    if held_back:
        return (f"no lesson above {above} holds in this environment: {held_back} held back, their scope contradicts "
                "it (above); --scope or --python says where you are")
    closest = "the library holds no lesson to score" if best_score is None else f"the closest scored {best_score:.3f}"
    return f"no lesson above {above}; {closest} (--min-similarity or {ENV_MIN_SIMILARITY} lowers the threshold)"


@click.command()
@click.argument("exp_id")
@db_option
@node_option
@node_token_option
@json_option
def show(exp_id: str, db: Path | None, node: str | None, node_token: str | None, as_json: bool) -> None:
    """Show one experience: text, scope, provenance (with its evidence, for a lesson learned from agents' traffic:
    the episodes and agents that gave it) and, from a local library, each stored copy's code (bytes of
    signs and scales, digest, baseline), usage counters (per environment for a scoped lesson) and the versions
    `dso edit` replaced. An id prefix of 8+
    characters will do locally; a node needs the full id.

    \b
    Examples:
      dso show 3f2a9c0b
      dso show 3f2a9c0b --json
    """
    with _store(db, node, node_token) as store:
        if node:
            exp = store.get(exp_id)
            if exp is None:
                raise click.ClickException(f"id {exp_id[:80]!r}: no such experience on {node} (give the full id)")
            data = exp.to_dict()
        else:
            full = _resolve(store, exp_id)
            data = {**store.get(full).to_dict(), "copies": [c._asdict() for c in store.copies(full)],
                    "history": [v._asdict() for v in store.versions(full)], "tags": store.tags(full),
                    "used_in": {env: {"uses": u, "helped": h} for env, (u, h) in
                                store.outcomes_by_environment(full).items()}}
    if as_json:
        _echo_json(data)
        return
    prov = data.get("provenance") or {}
    click.echo(f"{data['id']}  [{data['domain']}]  confidence {data['confidence']}{_evidence(data)}\n  {data['text']}")
    click.echo("  scope " + (" ".join(data.get("scope") or []) or "none: holds everywhere"))
    click.echo("  provenance " + "  ".join(f"{k}={v}" for k, v in prov.items()))
    if data.get("tags"):
        click.echo("  tags " + " ".join(data["tags"]))
    for c in data.get("copies", []):
        click.echo(f"  code from {c['signer'][:12] or '(this file)'}: {c['sign_bytes']} B signs + {c['scale_bytes']} B "
                   f"scales, baseline {c['baseline_id']}, digest {c['code_digest'][:16]}; float held: {c['float_held']}; "
                   f"received: {c['received']}; published: {c['published']}; used {c['uses']} times, helped "
                   f"{c['helped']}" + (f"; evidence {c['episodes']} episodes, {c['agents']} agents" if c['episodes'] else ""))
    for env, n in data.get("used_in", {}).items():  # a scoped lesson's outcomes, per environment it was used in
        click.echo(f"  used in {env or 'an environment not told'}: {n['uses']} times, helped {n['helped']}")
    for v in data.get("history", []):  # newest first: what `dso edit` replaced
        click.echo(f"  before {time.strftime('%Y-%m-%d %H:%M', time.gmtime(v['replaced_ms'] / 1000))} UTC, "
                   f"{v['id'][:12]} [{v['domain']}]: {v['text']}")


def _evidence(data: dict) -> str:
    """What a lesson learned from traffic stands on (its confidence starts on probation): the episodes and
    agents of every signer's copy added up, since each node's proxies saw their own agents' episodes (an
    agent behind two nodes' proxies is counted by each); a node's client sees its own row's only."""
    copies = data.get("copies") or [data.get("provenance") or {}]
    episodes, agents = (sum(c.get(k, 0) for c in copies) for k in ("episodes", "agents"))
    if not episodes:
        return ""
    signers = sum(1 for c in copies if c.get("episodes"))
    return f"  evidence: {episodes} episodes, {agents} agents" + (f" (from {signers} signers)" if signers > 1 else "")


@click.command("list")
@click.option("--domain", default=None, help="Only this domain.")
@click.option("--signer", default=None, help="Only lessons this signer holds (a prefix of its node id).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="Lessons on this page.")
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="Lessons to skip first.")
@db_option
@node_option
@node_token_option
@json_option
def list_cmd(domain: str | None, signer: str | None, limit: int, offset: int, db: Path | None, node: str | None,
             node_token: str | None, as_json: bool) -> None:
    """List the library's lessons, newest first, a page at a time: id, domain, signer and text. The
    last line says how many match and the --offset of the next page.

    \b
    Examples:
      dso list
      dso list --domain ops --limit 20 --offset 20
      dso list --signer 3f2a9c0b --json
      dso list --node http://127.0.0.1:8080 --domain ops
    """
    with _store(db, node, node_token) as store:
        total, page = store.listing(domain, signer, limit, offset)
    for e in page:  # --json: JSON Lines, one object per lesson
        if as_json:
            click.echo(json.dumps(e.to_dict()))
        else:
            click.echo(f"{e.id[:12]}  [{e.domain}]  {e.provenance.node_id[:12] or '(this file)'}  {e.text}")
    more = f"; the next page: --offset {offset + len(page)}" if offset + len(page) < total else ""
    click.echo(f"{len(page)} of {total} lessons shown (from offset {offset}){more}", err=True)


@click.command()
@click.argument("exp_id")
@click.argument("text")
@click.option("--domain", default=None, help="A new domain too (default: the old one's).")
@db_option
@json_option
def edit(exp_id: str, text: str, domain: str | None, db: Path | None, as_json: bool) -> None:
    """Give a lesson a new TEXT ("-": read it from standard input): a new version with a new id,
    encoded again; the old one is tombstoned (peers drop it too) and kept in the history that
    `dso show` prints. Prints the new id.

    \b
    Examples:
      dso edit 3f2a9c0b "When a ratio is given, write both parts as multiples of one unknown x"
      dso edit 3f2a9c0b - --domain math.ratio < lesson.txt
    """
    if text == "-":
        text = sys.stdin.read()
    with _store(db) as lib:
        new = lib.update(_resolve(lib, exp_id), text, domain)
    _echo_json(new.to_dict()) if as_json else click.echo(new.id)


@click.command()
@click.argument("exp_id")
@db_option
@node_option
@node_token_option
@json_option
def delete(exp_id: str, db: Path | None, node: str | None, node_token: str | None, as_json: bool) -> None:
    """Delete an experience: a tombstone that replicates to other nodes.

    \b
    Examples:
      dso delete 3f2a9c0b
      dso delete <full id> --node http://127.0.0.1:8080
    """
    with _store(db, node, node_token) as store:
        full = exp_id if node else _resolve(store, exp_id)
        if not store.delete(full):
            raise click.ClickException(f"id {exp_id[:80]!r}: no such experience")
    _echo_json({"deleted": full}) if as_json else click.echo(f"deleted {full}")


def _resolve(lib, prefix: str) -> str:
    """The full id an id prefix names in a local library (`Library.resolve`)."""
    try:
        return lib.resolve(prefix)
    except LibraryError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "msgpack"]), default="jsonl", show_default=True,
              help="jsonl: one experience and its vector a line; msgpack: signed batch files (the wire format).")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_KEY, show_default=True,
              help="Node key that signs batch files (msgpack/json); `dso keygen` writes it.")
@db_option
@json_option
def export_cmd(path: Path, fmt: str, key: Path, db: Path | None, as_json: bool) -> None:
    """Write the library to PATH: JSONL, or signed CompressedBatch files (msgpack or JSON).

    \b
    Examples:
      dso export lib.jsonl
      dso export lib.msgpack --format msgpack --key ./node.key
    """
    identity = None
    if fmt != "jsonl":
        identity = NodeIdentity.load(key.expanduser())
    with _store(db) as lib:
        written = [str(p) for p in export(lib, path, fmt, identity)]
    _echo_json({"written": written}) if as_json else click.echo("\n".join(f"wrote {p}" for p in written))


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option("--encode-texts", is_flag=True,
              help="Encode the texts of CompressedBatch files too and keep the floats: exact search over them, "
                   "for the encoder's time and 30 KB a row on disk. (JSONL files carry their floats already.)")
@json_option
def import_cmd(paths: tuple[Path, ...], db: Path | None, encode_texts: bool, as_json: bool) -> None:
    """Read JSONL or CompressedBatch files (hash and signature verified) into the library. A JSONL
    line may be an exported row or a lesson written by hand, {"text": "When ...", "domain": "ops"}:
    every text is encoded here, and a line whose vector does not encode its text is refused. A file
    with a broken line imports nothing, and the error names the line.

    \b
    Examples:
      dso import peer.msgpack lib.jsonl
      dso import lessons.jsonl       lines like {"text": "When X, do Y", "domain": "ops"}
      dso import --encode-texts peer.msgpack
    """
    added = {}
    with _store(db, create=True) as lib:
        for p in paths:
            try:
                added[str(p)] = import_file(lib, p, encode_texts)
            except DsoError as exc:
                before = "; ".join(f"{k}: {v} added" for k, v in added.items())
                done = f" (imported before it: {before})" if before else ""
                raise click.ClickException(f"{p}: {exc}{done}") from None
            if not as_json:
                click.echo(f"{p}: {added[str(p)]} added")
    if as_json:
        _echo_json({"added": added})


@click.command()
@db_option
@node_option
@node_token_option
@json_option
def stats(db: Path | None, node: str | None, node_token: str | None, as_json: bool) -> None:
    """Counts, domains, sizes and the profile of the library (or of a node's, with --node).

    \b
    Examples:
      dso stats --db ./lib.sqlite
      dso stats --node http://127.0.0.1:8080 --json
    """
    with _store(db, node, node_token) as store:
        data = store.stats()
    if as_json:
        _echo_json(data)
        return
    for key, value in data.items():
        click.echo(f"{key}: {json.dumps(value, default=str) if isinstance(value, (dict, list)) else value}")
