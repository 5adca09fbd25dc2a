"""Row-chunked work on every core (the C kernels release the GIL, so plain threads scale), and windows
in which numpy's BLAS runs on one thread."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterator

from threadpoolctl import ThreadpoolController

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
class _Worker(threading.local):
    active = False  # True in the pool's threads: work submitted from there runs inline


_worker = _Worker()


def _mark_worker() -> None:
    _worker.active = True


def _shared_pool() -> ThreadPoolExecutor:
    """One pool for the process: a DeltaSoup round decompresses 100 small batches, and a fresh
    pool per call spent more time starting threads than decoding."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="dsonet-rows",
                                       initializer=_mark_worker)
        return _pool


def run_chunks(fn: Callable[[int, int], None], n_rows: int, chunk: int) -> None:
    """Call fn(start, stop) for consecutive chunks of ``chunk`` rows, spread over the cores."""
    bounds = [(s, min(s + chunk, n_rows)) for s in range(0, n_rows, chunk)]
    if len(bounds) <= 1 or _worker.active:  # nothing to share, or already on a worker
        for b in bounds:
            fn(*b)
        return
    list(_shared_pool().map(lambda b: fn(*b), bounds))


_blas_turn = threading.RLock()  # one window at a time, process-wide; nested ones in the same thread are fine


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's BLAS on one thread while the block runs (keep it short): a threaded BLAS call on small
    matrices waits on its threads' wake-ups, worse on a busy machine (a 192 × 192 eigh waited 0.65 s a
    call on 2 busy cores). The limit is process-wide and threadpoolctl lets one thread control OpenBLAS
    at a time, so windows from different threads take turns: overlapping, the later one's limit would
    be ignored and its restore could leave the limit at 1 for good. A thread that holds a limit of its
    own for longer (`dsonet.network.access.serving`, a node's main thread) keeps control meanwhile:
    the window changes nothing there."""
    with _blas_turn, _blas().limit(limits=1, user_api="blas"):
        yield


@lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    return ThreadpoolController()  # found once (it scans the loaded libraries); 12 µs a limit after that
