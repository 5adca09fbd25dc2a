"""Who may do what on a dsonet NATS cluster: users, their passwords and their subject permissions.

One NATS account (``DSO``, JetStream enabled) holds every user:

- ``admin`` may do anything. `dso cluster up` creates the stream with it; an operator uses it to
  administer the stream (purge, delete, inspect consumers).
- ``node-<id16>``, one per node, named like the node's durable consumer (the first 16 hex digits
  of its node id). It may publish batches and tombstones to its own subjects only
  (``<prefix>.batch.<user>``, ``<prefix>.tombstone.<user>``, `dsonet.network.transport.subject_for`:
  the stream's limits per subject are then limits per member), read
  the stream's info, create, read and pull from ITS OWN durable consumer, ack only that
  consumer's messages, and receive replies on its own inbox (``_INBOX.<user>.>``). Everything
  else is refused by the server: deleting or purging the stream, creating it, deleting or reading
  another node's consumer, acking another node's messages, reading another user's replies.

The servers' routes authenticate with a third user, ``route``. Secrets are random 256-bit
passwords, one file per user under ``<state dir>/creds/`` (mode 0600, the folder 0700); the
servers' configs hold them too and are written 0600.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from dsonet.errors import DsoError

ACCOUNT = "DSO"
ADMIN = "admin"
ROUTE = "route"
_NODE_ID = re.compile(r"[0-9a-f]{64}")


class AuthError(DsoError):
    """A node id or a credentials file that cannot be used."""


def durable_for(node_id: str) -> str:
    """The durable consumer a node reads the stream with, and its NATS user name (`Node.durable`)."""
    if not _NODE_ID.fullmatch(node_id):
        raise AuthError(f"node id {node_id!r}: expected 64 lower-case hex digits (what `dso keygen` prints)")
    return f"node-{node_id[:16]}"


def inbox_prefix(user: str) -> str:
    """Replies to a user's requests come to subjects under this prefix, and only it may subscribe there."""
    return f"_INBOX.{user}"


def node_permissions(user: str, stream: str, prefix: str) -> dict[str, list[str]]:
    """The subjects a node user may publish to and subscribe to (nats-server's allow lists)."""
    api = "$JS.API"
    return {
        "publish": [
            f"{prefix}.batch.{user}",  # batches and tombstones into the stream, on this member's subjects only
            f"{prefix}.tombstone.{user}",
            f"{api}.STREAM.INFO.{stream}",  # is the stream there (start-up, repair)
            f"{api}.CONSUMER.INFO.{stream}.{user}",  # is my consumer there
            f"{api}.CONSUMER.CREATE.{stream}.{user}",  # make (or re-make) my consumer, 2.9 and later
            f"{api}.CONSUMER.CREATE.{stream}.{user}.>",  # the same with a filter subject, 2.10 and later
            f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{user}",  # the same, older clients
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{user}",  # pull from my consumer
            f"$JS.ACK.{stream}.{user}.>",  # ack, nak my consumer's deliveries
        ],
        "subscribe": [f"{inbox_prefix(user)}.>"],
    }


@dataclass(frozen=True)
class UserCreds:
    user: str
    password_file: Path

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()


class Credentials:
    """The users of one cluster, kept as password files in ``creds_dir`` (the folder is the record)."""

    def __init__(self, creds_dir: str | Path):
        self.dir = Path(creds_dir)

    def user(self, name: str, create: bool = False) -> UserCreds:
        path = self.dir / f"{name}.password"
        if not path.exists():
            if not create:
                raise AuthError(f"no credentials for user {name!r} in {self.dir}; "
                                f"add a node with `dso cluster add-node`")
            self.dir.mkdir(parents=True, exist_ok=True)
            self.dir.chmod(0o700)
            write_secret(path, secrets.token_urlsafe(32))
        return UserCreds(name, path)

    def remove(self, name: str) -> bool:
        path = self.dir / f"{name}.password"
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def node_users(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("node-*.password"))


def write_secret(path: Path, text: str) -> None:
    """Create ``path`` readable by its owner only, before a byte of the secret is in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT: set it
        f.write(text + "\n")


def render_accounts(creds: Credentials, stream: str, prefix: str) -> str:
    """The ``accounts`` block of a server config: the admin, every node user and their permissions."""
    admin = creds.user(ADMIN)
    users = [f'      {{user: "{ADMIN}", password: "{admin.password}"}}']
    for name in creds.node_users():
        perms = node_permissions(name, stream, prefix)
        users.append(f'      {{user: "{name}", password: "{creds.user(name).password}", permissions: {{\n'
                     f'        publish: {{allow: {_list(perms["publish"])}}}\n'
                     f'        subscribe: {{allow: {_list(perms["subscribe"])}}}\n'
                     f'      }}}}')
    body = "\n".join(users)
    return f"""accounts {{
  {ACCOUNT} {{
    jetstream: enabled
    users: [
{body}
    ]
  }}
}}"""


def _list(subjects: list[str]) -> str:
    return "[" + ", ".join(f'"{s}"' for s in subjects) + "]"
