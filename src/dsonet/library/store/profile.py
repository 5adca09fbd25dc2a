"""The profile a library file is bound to (`dsonet.codec.profile.Profile`): written into the file by
its first open, and every later open must bring the same one."""

from __future__ import annotations

import json
from typing import Callable

from dsonet.codec.profile import Profile
from dsonet.library.errors import LibraryError
from dsonet.library.store.rows import RowStore


def bind_profile(rows: RowStore, given: Profile | None, of_encoder: Callable[[], Profile]) -> Profile:
    """The file's profile: the one it holds, else ``given`` (else ``of_encoder()``, called only then),
    written into it; a ``given`` one must be the one the file holds."""
    raw = rows.meta("profile")
    stored = None
    if raw:
        described = json.loads(raw)
        digest = described.get("baseline_hash")
        stored = Profile.from_dict(described, None if digest is None else rows.baseline_named(digest))
    if given is None:
        given = stored or of_encoder()
    if stored is None:
        rows.add_baseline(given.baseline)
        rows.set_meta("profile", json.dumps(given.to_dict()))
    elif stored != given:
        raise LibraryError(
            f"profile: {rows.path} was created for {stored.to_dict()}, opened with {given.to_dict()}; "
            "open it with the same encoder and profile, or use another --db file"
        )
    return given
