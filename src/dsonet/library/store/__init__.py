"""The library's storage: the SQLite file and what is kept in it, row by row.

    file        the file's schema, its checks and migrations; `StoredRow`, one row as read
    rows        `RowStore`: one row per (experience id, signer), the CRDT rules, tombstones, counters
    records     what a row is read as: by the index, by `dso show`, by a write's caller, as a code again
    profile     the profile the file is bound to
    eviction    who loses rows past the capacity (fair shares by standing)
    quarantine  rows whose bytes were damaged, set aside with why
    history     the versions an edit replaced; tags, used_in: a lesson's tags and its outcomes per environment

The lowest room: it imports no other room of the library (`tests/test_import_layers.py`).
"""
