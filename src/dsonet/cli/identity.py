"""`dso keygen`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dsonet.cli.options import DEFAULT_KEY, json_option
from dsonet.identity import NodeIdentity


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_KEY)
@click.option("--force", is_flag=True, help="Overwrite an existing key (the node gets a new id).")
@json_option
def keygen(path: Path, force: bool, as_json: bool) -> None:
    """Create a node identity: an Ed25519 private key at PATH (mode 0600), by default where
    `dso node start` looks for it (~/.dsonet/node.key).

    The node id is sha256 of the public key; it signs every batch the node publishes.

    \b
    Examples:
      dso keygen
      dso keygen ./node.key --json
    """
    path = path.expanduser()
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists; pass --force to replace it (the node id will change)")
    ident = NodeIdentity.generate()
    ident.save(path)
    if as_json:
        click.echo(json.dumps({"path": str(path), "node_id": ident.node_id}))
        return
    click.echo(f"wrote {path}\nnode_id {ident.node_id}")
