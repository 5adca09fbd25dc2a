"""The row store reads any number of rows by key: lists longer than one `IN` query may bind are
read in chunks, every row found once, none lost at a chunk's edge."""

from dsonet.codec import compress
from dsonet.library.store.file import StoredRow
from dsonet.library.store.rows import _MAX_BOUND, RowStore
from lib_helpers import experiences, unit

N = 2 * _MAX_BOUND + 3  # two whole chunks and a partial one


def _store(tmp_path) -> tuple[RowStore, list[int]]:
    rows = RowStore(tmp_path / "lib.sqlite")
    x = unit(N, seed=4, dim=64)
    codes = compress(x, 64)
    written = rows.write(experiences(N, seed=4), None, codes.signs, codes.scales, codes.baseline, list(x), received=False)
    return rows, [r.seq for r in written.rows]


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


def test_the_rows_a_write_hands_the_index_are_the_rows_an_open_reads(tmp_path):
    """The index follows a write from what the write hands back (`Written.rows`), and an open from
    `index_rows`: both name the same fields alike, a re-delivery that replaces a row's code included."""
    rows = RowStore(tmp_path / "lib.sqlite")
    x = unit(6, seed=5, dim=64)
    codes = compress(x, 64)
    exps = experiences(6, seed=5)
    own = rows.write(exps[:4], None, codes.signs[:4], codes.scales[:4], codes.baseline, list(x[:4]), received=False)
    peer = rows.write(exps[2:], "peer", codes.signs[2:], codes.scales[2:], codes.baseline, None, received=True)
    read = [r for chunk in rows.index_rows() for r in chunk]
    assert read == own.rows + peer.rows
    assert [(r.signer, r.held, r.own) for r in read] == [("n1", 1, 1)] * 4 + [("peer", 0, 0)] * 4


def test_a_full_row_names_the_schema_s_columns_in_order(tmp_path):
    rows = RowStore(tmp_path / "lib.sqlite")
    assert tuple(c for _, c, *_ in rows.db.execute("PRAGMA table_info(experiences)")) == StoredRow._fields


def test_an_id_prefix_matches_its_characters_literally(tmp_path):
    rows, _ = _store(tmp_path)
    ids = sorted(e.id for e in rows.all())
    assert rows.ids_starting(ids[0][:12], 2) == [ids[0]]
    assert rows.ids_starting(ids[0][:12].upper(), 2) == [ids[0]]  # hex ids, typed in either case
    assert rows.ids_starting("%", 2) == [] and rows.ids_starting("_" * 8, 2) == []
