"""The one-BLAS-thread window: the limit is process-wide and threadpoolctl lets one thread control
OpenBLAS at a time, so windows from different threads take turns, nest within one thread, and leave
the limit as they found it."""

import threading

import numpy  # noqa: F401  (loads the BLAS the controller finds)
import pytest
from threadpoolctl import ThreadpoolController

from dsonet.codec.threads import one_blas_thread


def _blas_threads() -> set[int]:
    return {lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers}


@pytest.fixture(autouse=True)
def blas_threads() -> set[int]:
    """What numpy's BLAS runs on here (no limit of this thread's own: the windows' threads must be
    free to take control); a window's limit of 1 shows only where that is more."""
    threads = _blas_threads()
    if not threads or max(threads) < 2:
        pytest.skip(f"numpy's BLAS runs {threads or 'no'} thread(s) here: a limit of 1 would not show")
    return threads


def test_a_window_on_another_thread_waits_for_the_open_one_and_the_limit_is_restored_after_both(blas_threads):
    holding, release, entered, seen = threading.Event(), threading.Event(), threading.Event(), []

    def refit():  # a long window, as the index's refit holds one
        with one_blas_thread():
            holding.set()
            release.wait(10)

    def search():  # a short one on another thread
        with one_blas_thread():
            seen.append(_blas_threads())
            entered.set()

    fitter = threading.Thread(target=refit)
    fitter.start()
    assert holding.wait(10) and _blas_threads() == {1}
    searcher = threading.Thread(target=search)
    searcher.start()
    assert not entered.wait(0.2)  # its turn comes after the refit's window
    release.set()
    fitter.join(10)
    searcher.join(10)
    assert seen == [{1}] and _blas_threads() == blas_threads


def test_a_window_nested_in_the_same_thread_keeps_the_limit_until_the_outer_one_closes(blas_threads):
    with one_blas_thread():
        with one_blas_thread():
            assert _blas_threads() == {1}
        assert _blas_threads() == {1}
    assert _blas_threads() == blas_threads
