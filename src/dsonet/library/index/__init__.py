"""The library's ranking over its rows' codes, kept in step with the file.

    code_index  `CodeIndex`: the codes in memory, ranked in stages (sketch, estimate, support)
    stages      those stages: `Sketch`, `Subspace`, `Support`
    row_index   `RowIndex`: index row ↔ file row, and the exact rescoring from the floats held
    rescored    a text search's second stage applied to the first's candidates
    saved_fit   the fitted stages kept in the file, restored on open
    eigen       the linear algebra the stages fit with

Reads the store; knows nothing of the merged view (`tests/test_import_layers.py`).
"""
