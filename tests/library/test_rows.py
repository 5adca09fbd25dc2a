"""The row store reads any number of rows by key: lists longer than one `IN` query may bind are
read in chunks, every row found once, none lost at a chunk's edge."""

from dsonet.codec import compress
from dsonet.library.rows import _MAX_BOUND, RowStore
from lib_helpers import experiences, unit

N = 2 * _MAX_BOUND + 3  # two whole chunks and a partial one


def _store(tmp_path) -> tuple[RowStore, list[int]]:
    rows = RowStore(tmp_path / "lib.sqlite")
    x = unit(N, seed=4, dim=64)
    codes = compress(x, 64)
    written = rows.write(experiences(N, seed=4), None, codes.signs, codes.scales, codes.baseline, list(x), received=False)
    return rows, [r[0] for r in written.rows]


def test_rows_and_floats_are_read_by_seq_past_one_query_s_bound(tmp_path):
    rows, seqs = _store(tmp_path)
    asked = seqs[::-1] + [max(seqs) + 10]  # any order, and a seq the file does not hold
    found = rows.by_seq(asked)
    assert sorted(found) == sorted(seqs)
    assert sorted(e.text for e in found.values()) == sorted(e.text for e in experiences(N, seed=4))
    floats = rows.floats(asked)
    assert sorted(floats) == sorted(seqs) and all(v.shape == (64,) for v in floats.values())


def test_every_tombstoned_key_is_blocked_past_one_query_s_bound(tmp_path):
    rows, _ = _store(tmp_path)
    ids = [e.id for e in rows.all()]
    rows.tombstone(ids[: N - 1])
    keys = [(i, "n1") for i in ids] + [(ids[-1], "another signer")]
    blocked = rows.blocked(keys)
    assert blocked == {(i, "n1") for i in ids[: N - 1]}
