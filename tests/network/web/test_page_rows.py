"""The page's rows, read from a real library file a page at a time by key: every row once, filters in
SQL, the page back from a cursor, and errors that name the filter."""

import numpy as np
import pytest

from dsonet.codec import default_profile
from dsonet.experience import Experience, Provenance
from dsonet.library import Library
from dsonet.network.web.rows import Filters, FilterError, read_page

DIM = 16


@pytest.fixture
def library(tmp_path):
    lib = Library(tmp_path / "library.sqlite", profile=default_profile(DIM, "none"))
    exps = [Experience(f"When case {i} comes, do step {i}{' with 100% care' if i % 7 == 0 else ''}.",
                       "math" if i % 3 else "code.python", provenance=Provenance(("ab" if i % 2 else "cd") * 32))
            for i in range(23)]
    v = np.random.default_rng(0).standard_normal((len(exps), DIM)).astype(np.float32)
    lib.add_vectors(exps, v / np.linalg.norm(v, axis=1, keepdims=True))
    lib.close()
    return tmp_path / "library.sqlite", exps


def test_pages_by_key_visit_every_row_once_newest_first_and_come_back(library):
    path, exps = library
    seen, pages, before = [], [], None
    while True:
        page = read_page(path, before=before, limit=5)
        pages.append(page)
        seen += [r.text for r in page.rows]
        if page.older is None:
            break
        before = page.older
    assert seen == [e.text for e in reversed(exps)] and len(pages) == 5 and pages[-1].total == 23
    assert pages[0].newer is None and pages[1].newer is not None
    back = read_page(path, after=pages[2].newer, limit=5)  # from page 3, the page back is page 2
    assert [r.seq for r in back.rows] == [r.seq for r in pages[1].rows]


def test_filters_narrow_the_rows_in_sql(library):
    path, exps = library
    assert {r.domain for r in read_page(path, Filters(domain="code.python")).rows} == {"code.python"}
    assert len(read_page(path, Filters(domain="code.python")).rows) == 8
    # LIKE's wildcards in the filter are literal: "100%" matches the rows that say it, not every row
    assert [r.text for r in read_page(path, Filters(text="100% CARE")).rows] == \
           [e.text for e in reversed(exps) if "100%" in e.text]
    assert read_page(path, Filters(text="_")).rows == []
    assert [r.text for r in read_page(path, Filters(signer="abab")).rows] == [e.text for e in reversed(exps[1::2])]
    assert read_page(path, Filters(signer="abc")).rows == []
    row = read_page(path).rows[0]
    assert (row.copies, row.uses, row.helped, row.harmed) == (1, 0, 0, 0)


@pytest.mark.parametrize("call, field", [
    (lambda p: read_page(p, Filters(signer="<script>")), "signer"),
    (lambda p: read_page(p, Filters(text="x" * 201)), "text"),
    (lambda p: read_page(p, before=3, after=1), "before/after"),
    (lambda p: read_page(p, limit=0), "limit"),
])
def test_a_filter_it_cannot_use_is_refused_naming_it(library, call, field):
    with pytest.raises(FilterError, match=f"^{field}"):
        call(library[0])


def test_a_filtered_page_looks_through_a_bounded_window_and_its_cursor_goes_on_from_there(library):
    path, exps = library
    matches = [e.text for e in reversed(exps) if "100%" in e.text]  # rows 22, 15, 8, 1 (0-based 21, 14, 7, 0)
    seen, before, windows = [], None, []
    while True:
        page = read_page(path, Filters(text="100%"), before=before, scan=5)
        seen += [r.text for r in page.rows]
        windows.append(page.window)
        if page.older is None:
            break
        before = page.older
    assert seen == matches and len(windows) == 5  # 23 rows, 5 seqs a page
    assert windows[0] == (19, 23) and windows[-1] == (1, 3)
    back = read_page(path, Filters(text="100%"), after=3, scan=5)
    assert back.window == (4, 8) and [r.text for r in back.rows] == [exps[7].text]
    assert read_page(path, Filters(text="100%")).window == (1, 23)  # a default window holds the whole library
