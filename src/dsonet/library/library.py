"""The node's local experience library: one door to three rooms, each importing only those below it.

    store/   `RowStore`       the SQLite file: one row per (experience id, signer), the CRDT rules,
                              tombstones, eviction, outcome counters; quarantine, history, tags
    index/   `RowIndex`       the in-memory code index (`CodeIndex`) kept in step with the file,
                              exact rescoring, the fitted stages kept in the file
    view/    `MergedView`     near-duplicates shown as one experience (DeltaSoup's phase 4)
             `MergedHits`     that view read as hits: a cluster as one `Hit`, a search's walk
             `ScopedLessons`  lessons' scopes: a search in an environment, outcomes per environment
             `ReferencePool`  the rows a node's round of received batches is judged beside
             `DecodedRows`    (``lib.decoded``) the ê a round decoded, kept for the merge and the pool
    writes   `Writes`         the write path: rows into the file, then the index and the view follow

    lib = Library("lib.sqlite")                     # the default encoder, loaded on first use
    lib.add("When a ratio is asked, simplify the fraction first.", domain="math")
    hits = lib.search("ratio of two numbers")       # k = 5, two stages, ≥ the calibrated threshold, ≤ 2048 tokens
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Callable

import numpy as np

import dsonet.encoders  # through the module, so the default can be swapped (tests do) after this import
from dsonet.codec import CompressedBatch, Profile, profile_of
from dsonet.codec.bitdelta import BitDeltaCodes
from dsonet.codec.reference import Reference
from dsonet.encoders.rescore import backbone_rescorer
from dsonet.experience import Experience, Provenance, check_lesson
from dsonet.library.admitted import Admitted
from dsonet.library.contract import record_on_members
from dsonet.library.errors import DamagedFile, LibraryError, MissingLibrary
from dsonet.library.hits import Hit, Hits
from dsonet.library.index.code_index import Fitted, Refit
from dsonet.library.index.rescored import Rescorer
from dsonet.library.index.row_index import open_index
from dsonet.library.policy import MAX_TOKENS, K, calibrated
from dsonet.library.retrievals import Retrievals
from dsonet.library.store import history, quarantine
from dsonet.library.store import tags as tags_table
from dsonet.library.store.eviction import standing_of
from dsonet.library.store.file import ANY_SIGNER, damaged
from dsonet.library.store.profile import bind_profile
from dsonet.library.store.records import Copy, IngestResult, row_experience, stored_codes
from dsonet.library.store.rows import RowStore
from dsonet.library.view.decoded import DecodedRows
from dsonet.library.view.merge import MergeRule
from dsonet.library.view.merged_hits import MergedHits
from dsonet.library.view.reference import ReferencePool
from dsonet.library.view.saved_clusters import opened_view
from dsonet.library.view.scoped import ScopedLessons
from dsonet.library.view.search import Search
from dsonet.library.writes import Writes
from dsonet.scope import Scope

__all__ = ["Library"]

log = logging.getLogger(__name__)


class Library:
    def __init__(self, path: str | Path, encoder=None, profile: Profile | None = None, capacity: int | None = None,
                 support: np.ndarray | None = None, merge: MergeRule = MergeRule(),
                 trust: Callable[[str], float] | None = None, defer_merge: bool = False,
                 trusted: float | None = None, create: bool = True, owner: str | None = None,
                 rescore: bool | Rescorer = True):
        """``rescore``: a text search with the calibrated threshold scores its first-stage candidates
        again (`dsonet.library.index.rescored`): True, in the encoder's backbone space where a threshold was
        calibrated for it; or by the `Rescorer` given; False: one stage. ``owner``:
        the node this file belongs to; the rows added to it before it had one become its own
        (`RowStore.adopt`). ``create``: False refuses a path that holds no library yet (a read must not
        leave an empty file and its folders behind a mistyped --db). ``support``: vectors spanning the
        subspace the encoder's outputs lie in (e.g. `ZenReranker.support()`); turns on the index's stage 3.
        ``trust``: a signer's weight in the merged view (a node passes its reputation); every signer weighs
        1 without it. ``trusted``: past ``capacity``, signers ``trust`` puts at this or above keep a fair
        share each, the others one share between them, those it puts at 0 go first (this library's own rows
        always last; see `dsonet.library.store.eviction`). ``defer_merge``: writes leave the merged view and the
        index's refits to their steps instead of the next read (a node that searches while it ingests;
        `merge_jobs`, `refit_due`)."""
        self.path = Path(path).expanduser()
        if not create and not self.path.exists():
            raise MissingLibrary(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._encoder = encoder
        self._rescorer: Rescorer | bool = rescore  # True: built from the encoder at the first text search
        self.trust = trust
        self.defer_merge = defer_merge
        standing = None if trust is None or trusted is None else (lambda signer: standing_of(trust(signer), trusted))
        self.rows = RowStore(self.path, capacity, standing=standing)
        if owner:
            self.rows.adopt(owner)  # before the index reads the rows' signers
        self.retrievals = Retrievals()  # the ids `search` issued, for `outcome`
        self.profile: Profile | None = None  # known once bound to the file's profile
        try:  # reads the profile and every row's code: where the file's pages are broken, SQLite says so here
            self.profile = self._bind_profile(profile)
            quarantine.ensure_table(self.rows.db)  # rows whose bytes were damaged are set aside, not fatal
            self.damage: DamagedFile | None = None  # a page found broken while serving (`broken_page`)
            self.search_index = open_index(self.rows, self.profile, support, defer_merge)
            self.quarantined = quarantine.count(self.rows.db)  # with what the open swept, if it did
        except sqlite3.DatabaseError as exc:
            self.rows.close()
            if damaged(exc):
                raise DamagedFile(self.path, str(exc)) from None
            raise
        except BaseException:
            self.rows.close()
            raise
        idx = self.search_index
        self.decoded = DecodedRows(idx.index.reconstruct, self.profile.dim)  # ê a round decoded (`ingest`)
        self.view = opened_view(idx, merge, self.decoded, self.rows.db)
        self.merged_hits = MergedHits(idx, self.view, self.rows, trust)
        self.scoped = ScopedLessons(self.rows, idx, self.merged_hits)
        self.writes = Writes(self.rows, idx, self.decoded, self.profile, self._view_changed)
        self._search = Search(self.rows, idx, self.merged_hits, self.scoped, self.profile, lambda: self.rescorer)
        self._reference = ReferencePool(idx, self.decoded)

    # ------------------------------------------------------------------ setup

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = dsonet.encoders.default_encoder()
            if self.profile is not None and self._encoder.dim != self.profile.dim:
                raise LibraryError(
                    f"encoder: the default encoder {self._encoder.id} gives {self._encoder.dim} dims but {self.path} "
                    f"holds a {self.profile.dim}-dim profile ({self.profile.encoder_id}); open it with that encoder"
                )
        return self._encoder

    def _encode_documents(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts, kind="document")

    def _bind_profile(self, profile: Profile | None) -> Profile:
        profile = bind_profile(self.rows, profile, lambda: profile_of(self.encoder))
        if self._encoder is not None and self._encoder.dim != profile.dim:
            raise LibraryError(f"encoder: {self._encoder.id} gives {self._encoder.dim} dims, the profile has {profile.dim}")
        return profile

    @property
    def owner(self) -> str:
        """The node whose library this file is ('' for one no node has opened): its rows are this file's own."""
        return self.rows.meta("owner") or ""

    @property
    def db(self):
        """The SQLite connection, for inspection and maintenance (PRAGMAs, checkpoints)."""
        return self.rows.db

    @property
    def capacity(self) -> int | None:
        return self.rows.capacity

    def close(self) -> None:
        self.rows.close()

    def __enter__(self) -> "Library":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.search_index)

    # ------------------------------------------------------------------ writing

    def add(self, text: str, domain: str = "general", confidence: float = 0.5, tags: tuple[str, ...] = (),
            scope: Scope = Scope(), provenance: Provenance | None = None) -> Experience:
        """Encode one experience and store it with its float vector and code (ADD), as the file's
        `owner`'s unless ``provenance`` says otherwise, with this library's ``tags`` (`dsonet.library.store.tags`)
        and the ``scope`` it holds in (`dsonet.scope`; signed with it when published)."""
        check_lesson(text)
        exp = Experience(text, domain, confidence,
                         provenance or Provenance(self.owner, timestamp_ms=int(time.time() * 1000)), scope)
        self.writes.lesson(exp, tags, self._encode_documents)
        return exp

    def tag(self, exp_id: str, tags: tuple[str, ...]) -> None:
        """Give an experience more of this library's tags (a node tags what its API was sent)."""
        tags_table.tag(self.rows.db, exp_id, tags_table.checked(tags))

    def tags(self, exp_id: str) -> list[str]:
        return tags_table.of(self.rows.db, exp_id)

    def add_vectors(self, experiences: list[Experience], vectors: np.ndarray) -> list[str]:
        """Store experiences this node encoded itself (vectors in the profile's space). Returns ids stored."""
        return self.writes.own(experiences, vectors)

    def ingest(self, admitted: Admitted | CompressedBatch, encode_texts: bool = False,
               within: Callable[[], None] | None = None) -> IngestResult:
        """Store the codes of an already-verified batch, the rows its round admitted (a batch alone:
        every row), as rows of its signer (whatever provenance the rows claim). Idempotent.

        Floats: ``admitted.encodings``, where given, are kept in the file (``encode_texts``: encoded here
        where none are given), so searches rank peers' experiences as exactly as this node's own, at
        4·d bytes a row; not for a row whose float is held already (a stream replay), nor one tombstoned
        or evicted. The codes stay the peer's, so the merged view is the same on every node.
        ``admitted.decoded``: the merge clusters by them instead of decoding the codes again
        (`dsonet.library.view.decoded`). ``within``: the caller's statements on this file, run in the
        rows' transaction (a node's ledger records the batch's hash there, `dsonet.network.ledger`).
        """
        if isinstance(admitted, CompressedBatch):
            admitted = Admitted(admitted)
        return self.writes.received(admitted, self._encode_documents if encode_texts else None, within)

    def _view_changed(self, domains: set[str]) -> None:
        (self.view.defer if self.defer_merge else self.view.touch)(domains)

    # ------------------------------------------------------------------ steps, for a node
    # The merged view and the index's fit, for an owner that writes while it searches (``defer_merge``):
    # ask what is due and show the result under the lock every other call on the library holds; compute in
    # between without it (seconds at tens of thousands of rows). Rows are only ever appended or masked, so
    # the rows present when a job fell due can be read without the lock (`dsonet.network.ingest` takes turns).

    def merge_jobs(self) -> dict[str, np.ndarray]:
        """The domains writes changed since the last rebuild, with the rows to cluster (they count as
        built from now on)."""
        return self.view.pending()

    def build_merged(self, jobs: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
        """Each job's clusters (reads only its rows)."""
        return {domain: self.view.build(rows) for domain, rows in jobs.items()}

    def install_merged(self, jobs: dict[str, np.ndarray], built: dict[str, list[np.ndarray]]) -> None:
        """Show built clusters, and keep them for the next open (`dsonet.library.view.saved_clusters`)."""
        self.view.install(built, jobs)

    def refit_due(self) -> Refit | None:
        """The index stages (coarse sketch, subspace) the library has outgrown, or None."""
        return self.search_index.refit_due()

    def fit_index(self, due: Refit) -> Fitted:
        """Fit them again on the rows present when they fell due; searches meanwhile use the previous fit."""
        return self.search_index.fit(due)

    def install_fit(self, due: Refit, fitted: Fitted) -> None:
        """Show the new fit and keep it for the next open (`dsonet.library.index.saved_fit`)."""
        self.search_index.install_fit(due, fitted)

    def update(self, exp_id: str, text: str, domain: str | None = None) -> Experience:
        """New text (and ``domain``, where given) for an experience (UPDATE): a new version, re-encoded,
        same lineage; the old id is tombstoned and kept in the file's history (`versions`)."""
        return self.writes.new_version(exp_id, text, domain, self._encode_documents)

    def versions(self, exp_id: str) -> list[history.Version]:
        """The versions an experience replaced (`update`), newest first; [] for one never edited."""
        return history.versions(self.rows.db, exp_id)

    def delete(self, exp_id: str) -> bool:
        """Delete an experience here, every signer's row of it (DELETE); returns whether it was held."""
        return bool(self.apply_tombstones([exp_id]))

    def apply_tombstones(self, ids: list[str], signer: str = ANY_SIGNER) -> list[str]:
        """Record tombstones and drop the rows they cover: ``signer``'s rows only (a peer's signed
        tombstone), or every row (`ANY_SIGNER`, a local delete). Returns the ids that had a row."""
        held, removed = self.rows.tombstone(ids, signer)
        self.writes.removed(removed)
        return held

    def tombstones(self) -> list[str]:
        return self.rows.tombstones()

    def record_outcome(self, exp_id: str, helped: bool, environment: Scope | None = None) -> None:
        """One use of an experience and whether it helped (feeds eviction by usefulness); for a scoped
        lesson, counted too under the asker's ``environment`` (`dsonet.library.view.scoped`)."""
        self.rows.record_outcome(exp_id, helped)
        self.scoped.count_in(exp_id, helped, environment)

    def outcome(self, retrieval_id: str, helped: bool | None = None, lessons: dict[str, bool] | None = None,
                environment: Scope | None = None) -> int:
        """Whether the lessons of a `search` helped, all together (``helped``) or each (``lessons``: id ->
        helped; a lesson not named gets none), counted on every experience merged into each, in the
        environment the search was made in (else the reporter's ``environment``); returns how many
        lessons were judged (see `Retrievals.judged` for the errors)."""
        judged, searched_in = self.retrievals.judged(retrieval_id, helped, lessons)
        environment = searched_in or environment
        for hit, verdict in judged:
            record_on_members(self, [hit], verdict, environment)
        return len(judged)

    def outcomes(self, exp_id: str) -> tuple[int, int]:
        """(uses, helped) of an experience."""
        return self.rows.outcomes(exp_id)

    def add_evidence(self, exp_id: str, episodes: int = 1, agents: int = 0) -> Experience | None:
        """More evidence for a lesson this library holds as its own (`dsonet.proxy.learning`): ``episodes`` more
        episodes gave it, ``agents`` more distinct agents; its row is published again, so peers see the counts grow.
        The lesson as it now stands; None where no own row of it is held."""
        return self.rows.add_evidence(exp_id, episodes, agents)

    def unpublished(self, limit: int | None = None) -> tuple[list[Experience], BitDeltaCodes | None]:
        """This node's experiences not yet published, oldest first, with the codes stored for them, so a
        node publishes what it stored instead of compressing the floats a second time (coded again from
        them only where a file from protocol v1 coded them against another baseline than the profile's)."""
        rows = self.rows.unpublished(limit)
        if not rows:
            return [], None
        return [row_experience(r) for r in rows], stored_codes(rows, self.profile,
                                                               self.rows.baseline_id(self.profile.baseline_hash))

    def count_unpublished(self) -> int:
        return self.rows.count_unpublished()

    def mark_published(self, published: list[Experience]) -> None:
        """These experiences published, as `unpublished` gave them: one whose evidence grew meanwhile goes again."""
        self.rows.mark_published(published)

    # ------------------------------------------------------------------ reading

    def get(self, exp_id: str) -> Experience | None:
        return self.rows.get(exp_id)

    def all(self) -> list[Experience]:
        return self.rows.all()

    def listing(self, domain: str | None = None, signer: str | None = None, limit: int = 50,
                offset: int = 0) -> tuple[int, list[Experience]]:
        """A page of experiences, newest first, one per id, of one ``domain`` and a ``signer`` (a prefix
        of its id) where given; and how many match in all (`RowStore.listing`)."""
        if limit < 1 or offset < 0:
            raise LibraryError(f"limit {limit}, offset {offset}: give limit >= 1 and offset >= 0")
        return self.rows.listing(domain, signer, limit, offset)

    def copies(self, exp_id: str) -> list[Copy]:
        """Every signer's stored row of an experience (its code's sizes, digest and baseline, its
        flags and counters), oldest first; [] where none is held."""
        return self.rows.copies(exp_id)

    def resolve(self, prefix: str) -> str:
        """The one experience id that begins with ``prefix`` (8 characters of an id or more)."""
        return history.resolve(self.rows, prefix)

    def clusters(self, domain: str | None = None) -> dict[str, list[str]]:
        """The merged view: representative id -> member ids (sorted, distinct), for one domain or all."""
        return self.merged_hits.clusters(domain)

    def merged(self, rep_id: str) -> tuple[Experience, np.ndarray]:
        """A cluster as one experience (its representative) and its vector (see `dsonet.library.view.merge`)."""
        return self.merged_hits.merged(rep_id)

    def reference_vectors(self, limit: int, min_trust: float | None = None) -> Reference | None:
        """Up to ``limit`` trusted rows a round of received batches is judged beside, with their
        signers: this node's own (the newest), then, where it holds fewer than ``limit`` and
        ``min_trust`` is given, the newest rows of signers the library's ``trust`` puts at
        ``min_trust`` or more (their ê), each such signer a quarter of ``limit`` at most
        (`dsonet.library.view.reference`). None when there are none."""
        trusted = None if min_trust is None or self.trust is None else (lambda s: self.trust(s) >= min_trust)
        return self._reference.pick(limit, trusted)

    def vectors(self, ids: list[str]) -> np.ndarray:
        """Each id's vector: the float where held, else its reconstruction ê, (len(ids), d)."""
        return self.search_index.vectors(np.array([self.merged_hits.preferred_row(i) for i in ids], np.int64))

    def search(self, query: str, k: int = K, min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
               domain: str | None = None, tags: tuple[str, ...] = (), environment: Scope | None = None) -> Hits:
        """Top experiences for a text query (`RetrievalPolicy`: k = 5, scored at or above the
        calibrated threshold unless ``min_similarity`` says otherwise, ≤ 2048 tokens), of
        those carrying every one of ``tags``, with a retrieval id to report their `outcome` under.
        ``environment``: the asker's; lessons whose scope contradicts it are held back (`dsonet.library.view.scoped`)."""
        hits = self.search_vector(self.encoder.encode([query], kind="query")[0], k, min_similarity, domain, max_tokens,
                                  tags, environment, text=query)
        hits.retrieval_id = self.retrievals.issue(hits)
        return hits

    def search_vector(self, q: np.ndarray, k: int = K, min_similarity: float | None = None,
                      domain: str | None = None, max_tokens: int = MAX_TOKENS, tags: tuple[str, ...] = (),
                      environment: Scope | None = None, text: str | None = None) -> Hits:
        """`search` for a query vector in the profile's space (the caller encoded it once already).
        With the query's ``text`` and the calibrated threshold (``min_similarity`` None), the
        first stage's best candidates are scored again by the `rescorer`; an explicit
        ``min_similarity`` (or ``DSONET_MIN_SIMILARITY``) is a cosine in the profile's space, and a
        search by vector alone has no text to score: both are one stage."""
        return self._search(q, k, min_similarity, domain, max_tokens, tags, environment, text)

    @property
    def rescorer(self) -> Rescorer | None:
        """The second stage of a text search: over the encoder's backbone where a threshold was
        calibrated for it (`dsonet.encoders.rescore`), else None."""
        if self._rescorer is True:
            stage = backbone_rescorer(self.encoder)
            self._rescorer = stage if stage is not None and calibrated(stage.id) else False
        return self._rescorer or None

    def scopes(self, ids: list[str] | None = None) -> dict[str, Scope]:
        """id -> the scope of each lesson of ``ids`` (None: of every scoped lesson held; `dsonet.scope`)."""
        return self.scoped.scopes(ids)

    def outcomes_by_environment(self, exp_id: str) -> dict[str, tuple[int, int]]:
        """A scoped lesson's (uses, helped) per environment it was used in ('': not told)."""
        return self.scoped.outcomes_by_environment(exp_id)

    def accountable(self, hit: Hit, environment: Scope | None) -> tuple[str, ...]:
        """The signers an outcome of ``hit`` in ``environment`` speaks for (`ScopedLessons.accountable`)."""
        return self.scoped.accountable(hit, environment)

    def rank(self, q: np.ndarray, k: int, domain: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Index rows and scores for a unit query, best first, before merging (see `RowIndex.rank`)."""
        return self.search_index.rank(q, k, domain)

    def heal(self) -> list[int]:
        """Quarantine rows damaged since the file was opened (`dsonet.library.store.quarantine`) and stop
        serving them; returns their seqs (none: the failure that called for it was not a row's)."""
        seqs = quarantine.sweep(self.rows.db, self.profile)
        if seqs:
            self.writes.removed(seqs)
        self.quarantined = quarantine.count(self.rows.db)
        return seqs

    def broken_page(self, exc: sqlite3.DatabaseError) -> DamagedFile:
        """What to raise for a page found broken while serving (SQLite's ``malformed``): the rows that can
        still be read whole are swept (`heal`), and ``damage`` says from now on what is wrong and how to
        restore the file, for `/health`; the next start refuses the file in the same words."""
        try:
            self.heal()
        except sqlite3.DatabaseError:
            pass  # the broken page is in the rows' table: their sweep cannot read past it either
        self.damage = DamagedFile(self.path, str(exc))
        log.error("%s", self.damage)
        return self.damage

    def set_aside(self, keys: list[tuple[str, str]], why: str) -> list[int]:
        """Quarantine the rows of these (id, signer) keys, whole, with ``why``, and stop serving them;
        returns their seqs (`quarantine.set_aside`)."""
        seqs = quarantine.set_aside(self.rows.db, keys, why)
        if seqs:
            self.writes.removed(seqs)
            self.quarantined = quarantine.count(self.rows.db)
        return seqs

    def quarantine_list(self, limit: int = 1000) -> list[quarantine.Quarantined]:
        return quarantine.listed(self.rows.db, limit)

    def quarantine_drop(self, seqs: list[int] | None = None) -> int:
        """Forget quarantined rows (all when ``seqs`` is None); returns how many."""
        n = quarantine.drop(self.rows.db, seqs)
        self.quarantined = quarantine.count(self.rows.db)
        return n

    def stats(self) -> dict:
        return {"path": str(self.path), "profile": self.profile.to_dict(), **self.rows.counts(),
                "quarantined": self.quarantined,
                "clusters": len(self.view.clusters()), "tombstones": len(self.tombstones()),
                "index_bytes": self.search_index.index.memory_bytes(), "file_bytes": self.rows.file_bytes()}

