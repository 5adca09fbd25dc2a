"""The worker: what waits while the model decodes goes to it together, in one call, from one thread."""

import asyncio
import threading
from dataclasses import dataclass
from typing import Callable

import pytest

from dsonet.learn.chat import LLMError
from dsonet.serve.worker import Worker


@dataclass
class Job:
    text: str
    on_done: Callable | None = None
    cancelled: Callable | None = None


class SteppedRun:
    """A run shaped like the engine's: held until released, then one sequence ends per step, and between
    steps ``intake`` is asked for arrivals, which join the call. Records each call's sequences."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, requests, intake=None):
        running = list(requests)
        self.calls.append([r.text for r in running])
        self.started.set()
        self.release.wait(10)
        while running:
            more = list(intake()) if intake is not None else []
            self.calls[-1] += [r.text for r in more]
            running += more
            job = running.pop(0)
            if job.text == "boom":
                raise RuntimeError("decode failed")
            if not job.cancelled():
                job.on_done(job.text.upper())
        return []


def _run(worker: Worker, main):
    worker.start()
    try:
        return asyncio.run(main())
    finally:
        worker.close()


def test_requests_that_arrive_during_a_call_join_it_instead_of_waiting_for_it_to_end():
    run = SteppedRun()
    worker = Worker(run)

    async def main():
        first = asyncio.ensure_future(worker.generate([Job("a")]))
        await asyncio.to_thread(run.started.wait, 10)  # the worker is in a call with "a"
        rest = [asyncio.ensure_future(worker.generate([Job(x)])) for x in "bcd"]
        await asyncio.sleep(0.05)
        run.release.set()
        return await first, [await r for r in rest]

    assert _run(worker, main) == (["A"], [["B"], ["C"], ["D"]])
    assert run.calls == [["a", "b", "c", "d"]]  # one call: b, c and d joined it at its next step


def test_an_error_reaches_every_caller_of_its_call_and_the_worker_goes_on():
    run = SteppedRun()
    run.release.set()
    worker = Worker(run)

    async def main():
        with pytest.raises(LLMError, match="RuntimeError: decode failed"):
            await worker.generate([Job("boom"), Job("x")])
        return await worker.generate([Job("y")])

    assert _run(worker, main) == ["Y"]


def test_a_caller_that_went_away_before_its_turn_is_not_run():
    run = SteppedRun()
    worker = Worker(run)

    async def main():
        first = asyncio.ensure_future(worker.generate([Job("a")]))
        await asyncio.to_thread(run.started.wait, 10)
        gone = asyncio.ensure_future(worker.generate([Job("gone")]))
        await asyncio.sleep(0.01)
        gone.cancel()  # what a closed connection does to its request
        await asyncio.sleep(0.01)
        run.release.set()
        await first
        return await worker.generate([Job("b")])

    assert _run(worker, main) == ["B"]
    assert run.calls == [["a"], ["b"]]
