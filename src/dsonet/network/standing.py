"""An operator's say over keys: a ban list kept in the library file (it outlasts a restart).

A banned key's batches are refused (by the sender named in a message's header before anything
is verified, and by the verified signer when its rows would be stored), its rows are hidden from
searches and evicted first (its weight in the merged view is 0, as under the reputation floor),
and the batches it had waiting in the deferred queue are dropped. A reset lifts the ban and
starts the key again from the initial reputation, with its counts at zero. Reputation itself
moves as before: a ban is a gate beside it, not a change of it.
"""

from __future__ import annotations

import json
import re

from dsonet.errors import DsoError

_META = "banned_keys"
_KEY = re.compile(r"[0-9a-f]{64}")


class StandingError(DsoError, ValueError):
    """A key that is not a node id."""


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        shown = key[:80] if isinstance(key, str) else type(key).__name__
        raise StandingError(f"key: {shown!r} is not a node id; give the 64 hex characters of one "
                            "(GET /keys lists them)")
    return key


class Bans:
    """The banned keys, read from and written to the library file's meta table (caller holds its lock)."""

    def __init__(self, rows):
        self._rows = rows
        self.keys: frozenset[str] = frozenset(json.loads(rows.meta(_META) or "[]"))

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def _save(self, keys: frozenset[str]) -> None:
        self._rows.set_meta(_META, json.dumps(sorted(keys)))
        self.keys = keys  # one assignment: readers on other threads see the old set or the new one

    def add(self, key: str) -> None:
        self._save(self.keys | {check_key(key)})

    def remove(self, key: str) -> bool:
        held = check_key(key) in self.keys
        if held:
            self._save(self.keys - {key})
        return held


class Banned(DsoError):
    """A batch from a key this node's operator banned."""

    field = "banned"

    def __init__(self, key: str):
        super().__init__(f"{key[:12]}… is banned by this node's operator (dso node keys --reset KEY lifts it)")
