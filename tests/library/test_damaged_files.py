"""A damaged library file is refused in one line that names it and says what to do; a new one is 0600."""

import os
import shutil
import stat

import pytest

from dsonet.library import Library
from dsonet.library.errors import DamagedFile
from lib_helpers import experiences, unit

ROWS = 300


@pytest.fixture
def full(tmp_path, profile, encoder):
    """A library file holding 300 rows, closed (checkpointed into the main file)."""
    path = tmp_path / "library.sqlite"
    with Library(path, encoder=encoder, profile=profile) as lib:
        lib.add_vectors(experiences(ROWS), unit(ROWS))
    return path


def _truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def _flip_header(path):
    data = bytearray(path.read_bytes())
    data[3] ^= 0x10  # "SQLite format 3" no more
    path.write_bytes(bytes(data))


def _zero_header(path):
    data = bytearray(path.read_bytes())
    data[:100] = bytes(100)
    path.write_bytes(bytes(data))


def _directory(path):
    path.unlink()
    path.mkdir()


def _empty(path):
    os.truncate(path, 0)


@pytest.mark.parametrize("damage, why", [(_truncate, "truncated"), (_flip_header, "not an SQLite header"),
                                         (_zero_header, "not an SQLite header"), (_directory, "a directory"),
                                         (_empty, "0 bytes")])
def test_a_damaged_library_file_is_refused_in_one_line_that_says_what_to_do(full, profile, encoder, damage, why):
    damage(full)
    with pytest.raises(DamagedFile) as caught:
        Library(full, encoder=encoder, profile=profile)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{full} is damaged (") and why in message
    assert "restore it from a backup" in message and f"mv {full} {full}.damaged" in message


def test_a_library_file_truncated_to_0_bytes_does_not_open_empty(full, profile, encoder):
    _empty(full)
    with pytest.raises(DamagedFile, match="0 bytes"):
        Library(full, encoder=encoder, profile=profile)
    assert full.stat().st_size == 0  # left as found, for its owner to look at


def test_a_page_damaged_past_the_header_is_reported_as_damage_when_read(full, profile, encoder):
    data = bytearray(full.read_bytes())
    data[4096:len(data) // 2] = b"\xff" * (len(data) // 2 - 4096)  # the schema's page survives, the rows' do not
    full.write_bytes(bytes(data))
    with pytest.raises(DamagedFile, match="malformed"):
        Library(full, encoder=encoder, profile=profile)


def test_the_file_moved_aside_as_told_leaves_room_for_an_empty_library(full, profile, encoder):
    _flip_header(full)
    shutil.move(full, f"{full}.damaged")
    with Library(full, encoder=encoder, profile=profile) as lib:
        assert len(lib) == 0


def test_a_new_library_file_and_its_log_are_readable_by_their_owner_only(tmp_path, profile, encoder):
    path = tmp_path / "library.sqlite"
    with Library(path, encoder=encoder, profile=profile) as lib:
        lib.add_vectors(experiences(3), unit(3))
        for p in (path, tmp_path / "library.sqlite-wal", tmp_path / "library.sqlite-shm"):
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert sorted(p.name for p in tmp_path.iterdir()) == ["library.sqlite"]  # no temporary file left behind


def test_a_library_file_from_before_is_made_owner_only_when_opened(full, profile, encoder):
    full.chmod(0o644)
    with Library(full, encoder=encoder, profile=profile) as lib:
        assert len(lib) == ROWS
    assert stat.S_IMODE(full.stat().st_mode) == 0o600
