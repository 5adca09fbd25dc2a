"""The slots: what waits is decoded together, up to ``slots`` sequences a batch, by one worker thread."""

import asyncio
import threading

import pytest

from dsonet.learn.chat import LLMError
from dsonet.serve.slots import Slots


class GatedRun:
    """A run that records its batches and holds the first one until released."""

    def __init__(self):
        self.batches: list[list[str]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, requests):
        self.batches.append(list(requests))
        self.started.set()
        self.release.wait(10)
        if "boom" in requests:
            raise RuntimeError("decode failed")
        return [r.upper() for r in requests]


async def _started(run: GatedRun) -> None:
    await asyncio.to_thread(run.started.wait, 10)


def test_requests_that_wait_meanwhile_go_together_up_to_the_slots():
    run = GatedRun()
    slots = Slots(run, 3)

    async def main():
        slots.start()
        first = asyncio.ensure_future(slots.generate(["a"]))
        await _started(run)  # the worker is busy with "a": the rest waits
        rest = [asyncio.ensure_future(slots.generate([x])) for x in "bcde"]
        await asyncio.sleep(0.05)
        run.release.set()
        return await first, [await r for r in rest]

    try:
        first, rest = asyncio.run(main())
    finally:
        slots.close()
    assert first == ["A"] and rest == [["B"], ["C"], ["D"], ["E"]]
    assert run.batches == [["a"], ["b", "c", "d"], ["e"]]


def test_an_error_reaches_every_caller_of_its_batch_and_the_worker_goes_on():
    run = GatedRun()
    run.release.set()
    slots = Slots(run, 2)

    async def main():
        slots.start()
        with pytest.raises(LLMError, match="RuntimeError: decode failed"):
            await slots.generate(["boom", "x"])
        return await slots.generate(["y"])

    try:
        assert asyncio.run(main()) == ["Y"]
    finally:
        slots.close()


def test_a_caller_that_went_away_before_its_turn_is_not_run():
    run = GatedRun()
    slots = Slots(run, 1)

    async def main():
        slots.start()
        first = asyncio.ensure_future(slots.generate(["a"]))
        await _started(run)
        gone = asyncio.ensure_future(slots.generate(["gone"]))
        await asyncio.sleep(0.01)
        gone.cancel()  # what a closed connection does to its request
        await asyncio.sleep(0.01)
        run.release.set()
        await first
        return await slots.generate(["b"])

    try:
        assert asyncio.run(main()) == ["B"]
    finally:
        slots.close()
    assert run.batches == [["a"], ["b"]]


def test_fewer_than_one_slot_is_refused():
    with pytest.raises(ValueError, match="slots: 0"):
        Slots(lambda r: r, 0)
