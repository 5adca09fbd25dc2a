"""The merged view and the index's fit, in steps for an owner that writes while it searches
(``defer_merge``, a node): ask what is due, and show the result under the lock every other call
on the library holds; compute in between without it (seconds at tens of thousands of rows). Rows
are only ever appended or masked, so the rows present when a job fell due can be read without the
lock (`dsonet.network.ingest` takes the turns).
"""

from __future__ import annotations

import numpy as np

from dsonet.library.index.code_index import Fitted, Refit
from dsonet.library.view.decoded import DecodedRows
from dsonet.library.view.merge import MergedView
from dsonet.library.index.row_index import RowIndex
from dsonet.library.store.rows import RowStore
from dsonet.library.index.saved_fit import keep_fits
from dsonet.library.view.saved_clusters import keep_clusters


class DeferredSteps:
    """`dsonet.library.Library`'s steps, over the library's own parts (declared here, set by it)."""

    rows: RowStore
    search_index: RowIndex
    view: MergedView
    _decoded: DecodedRows

    def merge_jobs(self) -> dict[str, np.ndarray]:
        """The domains writes changed since the last rebuild, with the rows to cluster (they count
        as built from now on)."""
        return self.view.pending()

    def build_merged(self, jobs: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
        """Each job's clusters (reads only its rows)."""
        return {domain: self.view.build(rows) for domain, rows in jobs.items()}

    def install_merged(self, jobs: dict[str, np.ndarray], built: dict[str, list[np.ndarray]]) -> None:
        """Show built clusters, and keep them for the next open (`dsonet.library.view.saved_clusters`)."""
        self.view.install(built)
        for domain, clusters in built.items():
            self._built(domain, jobs[domain], clusters)

    def _built(self, domain: str, rows: np.ndarray, clusters: list[np.ndarray]) -> None:
        """A domain's clusters were built from ``rows``: kept in the file, and the rows' ê let go."""
        keep_clusters(self.rows.db, self.search_index.index, self.view, domain, rows, clusters)
        self._decoded.merged(rows, self.search_index.index.live)

    def refit_due(self) -> Refit | None:
        """The index stages (coarse sketch, subspace) the library has outgrown, or None."""
        return self.search_index.index.refit_due()

    def fit_index(self, due: Refit) -> Fitted:
        """Fit them again on the rows present when they fell due; searches meanwhile use the previous fit."""
        return self.search_index.index.fit(due)

    def install_fit(self, due: Refit, fitted: Fitted) -> None:
        """Show the new fit (the sketch catching up on rows added since) and keep it for the next open."""
        index = self.search_index.index
        index.install(fitted)
        keep_fits(self.rows.db, index, {name for name in ("subspace", "sketch") if getattr(due, name)})
