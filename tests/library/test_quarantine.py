"""A row damaged inside a readable file (a flipped byte in its text, a code blob of the wrong
length) is quarantined with one log line and counted, and the library serves the rest; an
operator lists the quarantined rows and drops them."""

import logging
import sqlite3
from contextlib import closing

import pytest

from dsonet.library import Library
from lib_helpers import experiences, unit


def _library_with_rows(tmp_path, encoder, profile, n=6):
    path = tmp_path / "lib.sqlite"
    with Library(path, encoder=encoder, profile=profile) as lib:
        exps = experiences(n, "math")
        lib.add_vectors(exps, unit(n, 1))
    return path, exps


def _flip_in_file(path, needle: bytes) -> None:
    """Overwrite one byte of ``needle`` in the file itself with 0xff (never valid in UTF-8)."""
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0
    data[at + 3] = 0xFF
    path.write_bytes(bytes(data))


def test_damaged_rows_are_quarantined_counted_and_the_rest_served(tmp_path, encoder, profile, caplog):
    path, exps = _library_with_rows(tmp_path, encoder, profile)
    db = sqlite3.connect(path)
    db.execute("UPDATE experiences SET signs = substr(signs, 2) WHERE id = ?", (exps[1].id,))  # one byte short
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    _flip_in_file(path, exps[3].text.encode())  # a flipped byte inside a text, in the file's pages
    with caplog.at_level(logging.WARNING, logger="dsonet.library.store.quarantine"):
        # before: opening raised ValueError (buffer size must be a multiple of element size), and
        # reading the text raised sqlite3.OperationalError (Could not decode to UTF-8)
        with Library(path, encoder=encoder, profile=profile) as lib:
            held = {e.id for e in lib.all()}
            hits = lib.search(exps[0].text, k=10, min_similarity=-1.0)
            listed = lib.quarantine_list()
            stats = lib.stats()
            dropped = lib.quarantine_drop([listed[0].seq])
            left = lib.quarantine_list()
    assert held == {e.id for e in exps} - {exps[1].id, exps[3].id}
    assert {h.experience.id for h in hits} == held
    assert stats["quarantined"] == 2
    assert sorted(q.id for q in listed) == sorted([exps[1].id, exps[3].id])
    assert {q.why for q in listed} == {"signs blob is not 48 bytes", "text is not UTF-8"}
    assert len([r for r in caplog.records if "quarantined" in r.getMessage()]) == 2  # one line a row
    assert dropped == 1 and len(left) == 1
    with Library(path, encoder=encoder, profile=profile) as lib:  # set aside once, not again at each open
        assert lib.stats()["quarantined"] == 1 and len(lib.all()) == 4


def test_a_row_damaged_after_open_is_quarantined_at_the_read_that_finds_it(tmp_path, encoder, profile):
    path, exps = _library_with_rows(tmp_path, encoder, profile)
    with Library(path, encoder=encoder, profile=profile) as lib:
        with closing(sqlite3.connect(path)) as db, db:  # another writer damages a row under the open library
            db.execute("UPDATE experiences SET text = CAST(X'57686ee0' AS TEXT) WHERE id = ?", (exps[2].id,))
        with pytest.raises(sqlite3.OperationalError, match="decode"):
            lib.all()  # what a reader sees; a node heals it (`Node._healing`)
        assert lib.heal() and lib.stats()["quarantined"] == 1
        assert {e.id for e in lib.all()} == {e.id for e in exps} - {exps[2].id}
        assert exps[2].id not in {h.experience.id for h in lib.search(exps[2].text, k=10, min_similarity=-1.0)}
