"""`dso keygen`."""

from __future__ import annotations

from pathlib import Path

import click

from dsonet.identity import NodeIdentity


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default=Path("~/.dsonet/node.key"))
@click.option("--force", is_flag=True, help="Overwrite an existing key (the node gets a new id).")
def keygen(path: Path, force: bool) -> None:
    """Create a node identity: an Ed25519 private key at PATH (mode 0600).

    The node id is sha256 of the public key; it signs every batch the node publishes.

    \b
    Example:
      dso keygen ./node.key
    """
    path = path.expanduser()
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists; pass --force to replace it (the node id will change)")
    ident = NodeIdentity.generate()
    ident.save(path)
    click.echo(f"wrote {path}\nnode_id {ident.node_id}")
