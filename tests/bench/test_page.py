"""`dso bench page`'s measurements: a real node's data (library file and journal at their bounds),
every case answered 200 by the node's app behind its token's cookie, and what each case shows."""

import asyncio
from contextlib import closing

import pytest

from dsonet.bench import page
from dsonet.library.store.rows import RowStore
from dsonet.network.journal import ROUNDS, Journal


@pytest.mark.slow  # ~35 s: the journal is filled line by line, as a node writes it
def test_every_case_is_a_whole_page_of_a_real_node_with_a_full_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("DSONET_CACHE", str(tmp_path / "cache"))
    data = page.library_dir(2_500)
    # read through the store room, as built: a Library's open would fit the index and keep the fit in the file
    with closing(RowStore(data / "library.sqlite")) as store:
        rows, signers = store.counts()["rows"], {r.signer for chunk in store.index_rows() for r in chunk}
    assert (rows, len(signers)) == (2_500, page.PEERS)
    assert len(Journal(data / "journal.sqlite").rounds(limit=ROUNDS + 1)) == ROUNDS
    cases = {c["case"]: c for c in asyncio.run(page._measure(data, runs=1))}
    assert len(cases) == 8 and all(c["median_ms"] > 0 for c in cases.values())
    assert cases["first page"]["rows_shown"] == cases["page at 90% depth"]["rows_shown"] == 50
    assert cases["text, matching no row"]["rows_shown"] == 0
    assert 0 < cases["domain, 1% of rows"]["rows_shown"] <= 50
