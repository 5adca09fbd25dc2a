"""The slots: concurrent HTTP requests share one model by waiting in one queue for one worker thread.

    slots = Slots(run, 4)            # run(requests) -> [Generated], one call decodes them together
    [done] = await slots.generate([request])

The worker takes what is waiting, up to ``slots`` sequences, and hands them to ``run`` as one
batch; sequences that arrive meanwhile wait for the next batch. A model runs one batch at a
time anyway (its context is not thread-safe), so one thread is all it needs, and the event loop
never blocks on it: results come back through each caller's loop (``call_soon_threadsafe``),
and so do streamed pieces (the caller's ``on_text`` does that). A sequence whose caller went
away (a closed connection cancels its future) before the worker reached it is dropped unrun.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dsonet.learn.chat import LLMError

log = logging.getLogger(__name__)
Run = Callable[[Sequence[Any]], list[Any]]  # requests -> one result each, in order


@dataclass
class _Waiting:
    request: Any
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, result, error)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile: its caller is gone
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Slots:
    def __init__(self, run: Run, slots: int = 1):
        if slots < 1:
            raise ValueError(f"slots: {slots}; give at least 1")
        self.run, self.slots = run, slots
        self._queue: queue.Queue[_Waiting | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="dso-llm-slots", daemon=True)
        self.busy = 0  # sequences in the batch being decoded now

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking batches; the one being decoded finishes first (up to ``timeout_s``)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    async def generate(self, requests: Sequence[Any]) -> list[Any]:
        """Each request's result, once the worker has run it (with whatever else was waiting)."""
        loop = asyncio.get_running_loop()
        waiting = [_Waiting(r, loop.create_future(), loop) for r in requests]
        for w in waiting:
            self._queue.put(w)
        return list(await asyncio.gather(*(w.future for w in waiting)))

    def _take(self) -> tuple[list[_Waiting], bool]:
        """The next batch (blocking for its first sequence) and whether the queue was closed."""
        first = self._queue.get()
        if first is None:
            return [], True
        batch, closed = [first], False
        while len(batch) < self.slots:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                closed = True
                break
            batch.append(more)
        return [w for w in batch if not w.future.cancelled()], closed

    def _work(self) -> None:
        closed = False
        while not closed:
            batch, closed = self._take()
            if not batch:
                continue
            self.busy = len(batch)
            try:
                results = self.run([w.request for w in batch])
            except Exception as exc:  # every caller of the batch gets the error; the worker goes on
                log.exception("generation failed for a batch of %d", len(batch))
                error = exc if isinstance(exc, LLMError) else LLMError(f"{type(exc).__name__}: {exc}")
                for w in batch:
                    w.settle(error=error)
            else:
                for w, result in zip(batch, results):
                    w.settle(result)
            finally:
                self.busy = 0
