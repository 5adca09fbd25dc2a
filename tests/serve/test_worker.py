"""The worker: what waits while the model decodes goes to it together, in one call, from one thread."""

import asyncio
import threading

import pytest

from dsonet.learn.chat import LLMError
from dsonet.serve.worker import Worker


class GatedRun:
    """A run that records its calls and holds the first one until released."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, requests):
        self.calls.append(list(requests))
        self.started.set()
        self.release.wait(10)
        if "boom" in requests:
            raise RuntimeError("decode failed")
        return [r.upper() for r in requests]


def _run(worker: Worker, main):
    worker.start()
    try:
        return asyncio.run(main())
    finally:
        worker.close()


def test_requests_that_arrive_during_a_call_go_together_in_the_next():
    run = GatedRun()
    worker = Worker(run)

    async def main():
        first = asyncio.ensure_future(worker.generate(["a"]))
        await asyncio.to_thread(run.started.wait, 10)  # the worker is busy with "a": the rest waits
        rest = [asyncio.ensure_future(worker.generate([x])) for x in "bcd"]
        await asyncio.sleep(0.05)
        run.release.set()
        return await first, [await r for r in rest]

    assert _run(worker, main) == (["A"], [["B"], ["C"], ["D"]])
    assert run.calls == [["a"], ["b", "c", "d"]]


def test_an_error_reaches_every_caller_of_its_call_and_the_worker_goes_on():
    run = GatedRun()
    run.release.set()
    worker = Worker(run)

    async def main():
        with pytest.raises(LLMError, match="RuntimeError: decode failed"):
            await worker.generate(["boom", "x"])
        return await worker.generate(["y"])

    assert _run(worker, main) == ["Y"]


def test_a_caller_that_went_away_before_its_turn_is_not_run():
    run = GatedRun()
    worker = Worker(run)

    async def main():
        first = asyncio.ensure_future(worker.generate(["a"]))
        await asyncio.to_thread(run.started.wait, 10)
        gone = asyncio.ensure_future(worker.generate(["gone"]))
        await asyncio.sleep(0.01)
        gone.cancel()  # what a closed connection does to its request
        await asyncio.sleep(0.01)
        run.release.set()
        await first
        return await worker.generate(["b"])

    assert _run(worker, main) == ["B"]
    assert run.calls == [["a"], ["b"]]
