"""Retrieval ids: what a searcher handed out, so an outcome can only be about lessons it gave.

An agent reports whether the lessons of a search helped by naming the search's retrieval id,
not experience ids: no client can sink a peer's reputation (or a lesson's help rate) with
outcomes for lessons it never received, and each retrieval's outcome counts once.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable

from dsonet.errors import DsoError
from dsonet.library.hits import Hits
from dsonet.scope import Scope

PENDING = 10_000  # retrievals awaiting an outcome; the oldest are forgotten first


class UnknownRetrieval(DsoError, KeyError):
    """An outcome for a retrieval id that was not issued here, was forgotten, or was used already."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown retrieval id"


class OutcomeError(DsoError, ValueError):
    """An outcome that names neither ``helped`` nor ``lessons``, or lessons its retrieval did not give."""


def check_outcome(helped: bool | None, lessons: dict[str, bool] | None) -> None:
    """An outcome's verdicts: ``helped`` (every lesson) or ``lessons`` (id -> helped), exactly one."""
    if (helped is None) == (lessons is None):
        raise OutcomeError("outcome: give helped (every lesson of the retrieval) or lessons (id -> helped), one of them")
    if lessons is not None and (not lessons or not all(isinstance(v, bool) for v in lessons.values())):
        raise OutcomeError("lessons: give at least one {experience id: true|false}")


class Retrievals:
    def __init__(self, capacity: int = PENDING):
        self.capacity = capacity
        self._pending: OrderedDict[str, list] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, hits: Hits) -> str | None:
        """A new retrieval id for these hits (and the environment a `Hits` was searched in); None for a
        search that found nothing (there is nothing to judge, so no id that an outcome could not be
        recorded under)."""
        if not hits:
            return None
        rid = secrets.token_hex(12)
        with self._lock:
            self._pending[rid] = (list(hits), hits.environment)
            while len(self._pending) > self.capacity:
                self._pending.popitem(last=False)
        return rid

    def take(self, retrieval_id: str, lessons: Iterable[str] = ()) -> tuple[list, Scope | None]:
        """The hits of a retrieval and its environment, once; raises `UnknownRetrieval` after that, and
        `ValueError` (the retrieval kept for a corrected report) when ``lessons`` names an experience it
        did not give."""
        with self._lock:
            hits, environment = self._pending.get(retrieval_id, (None, None))
            stray = sorted(set(lessons) - {h.experience.id for h in hits}) if hits is not None else []
            if hits is not None and not stray:
                del self._pending[retrieval_id]
        if stray:
            raise ValueError(f"lessons: {[s[:16] for s in stray[:3]]} were not given by retrieval "
                             f"{retrieval_id[:40]!r}; judge only the experiences its search returned")
        if hits is None:
            raise UnknownRetrieval(f"retrieval_id {retrieval_id[:40]!r}: unknown, forgotten or already recorded; send "
                                   f"the id a search returned (the last {self.capacity} searches with lessons are "
                                   "kept), once")
        return hits, environment

    def judged(self, retrieval_id: str, helped: bool | None = None,
               lessons: dict[str, bool] | None = None) -> tuple[list[tuple[object, bool]], Scope | None]:
        """(hit, helped) for each lesson of a retrieval an outcome judges, once: every lesson gets
        ``helped``, or each lesson named in ``lessons`` (id -> helped) its own verdict; and the
        environment the retrieval was searched in. Raises `OutcomeError` for arguments that say
        neither (or a lesson the retrieval did not give; the retrieval is kept for a corrected report),
        `UnknownRetrieval` for an id not issued here."""
        check_outcome(helped, lessons)
        try:
            hits, environment = self.take(retrieval_id, lessons or ())
        except ValueError as exc:
            raise OutcomeError(str(exc)) from None
        if lessons is None:
            return [(h, bool(helped)) for h in hits], environment
        return [(h, lessons[h.experience.id]) for h in hits if h.experience.id in lessons], environment
