"""How a node's threads share its state: turns taken in arrival order, work cut into short turns.

A node reads the stream on one thread (DeltaSoup rounds, then storing what they admit) and
answers agents on others (searches, reads, submissions). Both touch the library: one SQLite
connection, and the in-memory code index and merged view, which are not safe to read while a
write changes them. So every library call holds `FairLock`, and ingest holds it for one turn
of at most 1,000 rows (one full batch, or several small ones), never for a whole round: the
verification, decompression, filter and re-encoding of a round run without it, and so does
re-clustering the merged view (seconds at tens of thousands of rows; see `MergedView`). A
search therefore waits for at most one turn, whatever the size of the round in progress, and
always sees the library as of committed batches (never half of one).

We chose this over a second read-only connection with a snapshot of the index: the index and
the merged view live in memory and change with every write, so a snapshot would mean copying
them (hundreds of MB at 7680 dims) or making them persistent structures; a lock held for one
bounded turn bounds the wait just as well and keeps one copy.

`SerialEncoder` does the same for the encoder, which the ingest thread (re-encoding peers'
texts) and the readers (encoding queries) share: one call at a time (tokenizers are not safe
to call concurrently, and two encodes on two cores would only slow each other), in chunks of
`ENCODE_CHUNK` texts, so a query waits for one chunk, not for a round's thousands of texts.

`serving` holds BLAS to one thread fewer than the cores while a node serves: the ingest
thread's matrix work (a round's filter, refitting the index) then leaves a core to the
searches. Measured in `dso bench robustness --node-only`'s volume attack on 2 busy cores, BLAS
on both cores made search p99 1.25 s (its threads spin between calls), on one 0.76 s.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

ENCODE_CHUNK = 32  # texts per turn on the encoder: a query waits for at most this many (~0.15 s for MiniLM on 2 cores)


class FairLock:
    """A mutex granted in the order it was asked for (a ticket lock).

    `threading.Lock` promises no order: a thread that releases it and asks again at once
    usually gets it back, so a loop of short turns could still starve a waiting search."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next = 0  # the next ticket handed out
        self._serving = 0  # the ticket that holds the lock

    def __enter__(self) -> "FairLock":
        with self._cond:
            ticket = self._next
            self._next += 1
            self._cond.wait_for(lambda: self._serving == ticket)
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()

    @property
    def waiting(self) -> int:
        """Threads waiting for the lock (the holder not counted)."""
        with self._cond:
            return max(0, self._next - self._serving - 1)


class SerialEncoder:
    """An encoder shared by threads: `encode` takes turns on a `FairLock`, `ENCODE_CHUNK` texts a turn.
    Everything else (id, dim, ...) is the wrapped encoder's."""

    def __init__(self, encoder, chunk: int = ENCODE_CHUNK):
        self.encoder, self.chunk = encoder, chunk
        self._turn = FairLock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def encode(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        texts = list(texts)
        parts = []
        for start in range(0, len(texts), self.chunk):
            with self._turn:
                parts.append(np.asarray(self.encoder.encode(texts[start : start + self.chunk], kind=kind), np.float32))
        return np.concatenate(parts) if parts else np.zeros((0, self.encoder.dim), np.float32)


@contextmanager
def serving() -> Iterator[int]:
    """BLAS held to cores − 1 threads (at least 1) inside; yields that number. Process-wide: for a
    process whose job is serving a node (`dso node start`), restored on exit."""
    threads = max(1, (os.cpu_count() or 1) - 1)
    with threadpool_limits(limits=threads, user_api="blas"):
        yield threads
