"""One worker thread between the HTTP requests and the model: sequences join the decoding as they arrive.

    worker = Worker(llm.run)         # run(requests, intake) -> [Generated], its slots decoded together
    [done] = await worker.generate([request])

The model's ``run`` decodes its slots together, gives a finished slot the next waiting sequence at
once, and between decode steps asks ``intake`` for sequences that arrived meanwhile
(`dsonet.learn.llama_engine`). So the worker hands it what is waiting when it starts a call, and
every later arrival joins that call at the next step: a request never waits for another's answer
to end, only for a free slot. The model runs one call at a time anyway (its context is not
thread-safe), so one thread is all it needs, and the event loop never blocks on it: each result
goes back through its caller's loop (``call_soon_threadsafe``) as soon as its sequence finishes, as
streamed pieces do (the caller's ``on_text`` sees to that). A sequence whose caller went away (a
closed connection cancels its future) is dropped before it starts, or stopped at the next step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from dsonet.learn.chat import LLMError

log = logging.getLogger(__name__)
Run = Callable[..., list[Any]]  # run(requests, intake=...) -> one result each, in order


@dataclass
class _Waiting:
    request: Any
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, result, error)

    def bound(self) -> Any:
        """The request, reporting its result to this caller and stopping once the caller is gone."""
        return replace(self.request, on_done=self.settle, cancelled=self.future.cancelled)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile: its caller is gone
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Worker:
    def __init__(self, run: Run):
        self.run = run
        self._queue: queue.Queue[_Waiting | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="dso-llm-worker", daemon=True)
        self.running = 0  # sequences taken into the call being decoded now
        self.closed = False
        self._taken: list[_Waiting] = []  # every caller of the call being decoded

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Take no more calls; the one being decoded finishes first (up to ``timeout_s``)."""
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

    def _take(self, block: bool) -> list[_Waiting]:
        """Everything waiting (with ``block``, waiting for the first), less what its caller gave up;
        ``closed`` once close() was asked."""
        batch: list[_Waiting] = []
        while not self.closed:
            try:
                item = self._queue.get(block=block and not batch)
            except queue.Empty:
                break
            if item is None:
                self.closed = True
            else:
                batch.append(item)
        return [w for w in batch if not w.future.cancelled()]

    def _intake(self) -> list[Any]:
        """Sequences that arrived during the call: they join it at the model's next step."""
        more = self._take(block=False)
        self._taken += more
        self.running += len(more)
        return [w.bound() for w in more]

    def _work(self) -> None:
        while not self.closed:
            self._taken = self._take(block=True)
            if not self._taken:
                continue
            self.running = len(self._taken)
            try:
                self.run([w.bound() for w in self._taken], intake=self._intake)
            except Exception as exc:  # every caller still waiting in the call gets the error; the worker goes on
                log.exception("generation failed for a call of %d sequences", len(self._taken))
                error = exc if isinstance(exc, LLMError) else LLMError(f"{type(exc).__name__}: {exc}")
                for w in self._taken:
                    w.settle(error=error)  # a caller already answered keeps its answer (_settle)
            finally:
                self.running = 0
