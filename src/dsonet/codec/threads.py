"""Row-chunked work on every core: the C kernels release the GIL, so plain threads scale."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

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
