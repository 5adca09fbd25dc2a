"""`dso bench coldstart`'s measurements: the real CLI in fresh processes on a real library file,
each set-up as it says (the recomputing runs start without what the file keeps), and import times parsed."""

import sqlite3

from dsonet.bench import coldstart
from dsonet.library import Library


def _tables(path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_cold_search_runs_every_setup_and_refitted_runs_start_without_the_kept_fit(tmp_path, monkeypatch):
    path = tmp_path / "lib.sqlite"
    with Library(path) as lib:  # the default encoder, in numpy
        lib.add(coldstart.QUERY.replace("how fast does it go?", "divide the distance by the time."))
    dropped = []
    drop = coldstart._drop_saved_fit
    monkeypatch.setattr(coldstart, "_drop_saved_fit", lambda p: (dropped.append(p), drop(p)))
    rows = coldstart.cold_search(path, 2, [("numpy", False), ("numpy", True)])
    assert [r["setup"] for r in rows] == ["numpy encoder, all recomputed", "numpy encoder, fit and clusters kept in the file"]
    assert all(r["runs"] == 2 and 0 < r["min_s"] <= r["median_s"] for r in rows)
    assert dropped == [path, path]  # once a round, before the refitted run only
    assert "index_fits" not in _tables(path)  # a library this small has no stage to fit or keep
    assert "merged_clusters" in _tables(path)  # but its one domain's clusters, built by the search


def test_import_time_counts_the_top_level_modules():
    alone = coldstart.import_seconds("json")
    assert 0 < alone < coldstart.import_seconds("json, dsonet.cli.main")
