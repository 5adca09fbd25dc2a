"""One worker thread between the HTTP requests and the model: what waits is run together.

    worker = Worker(llm.run)         # run(requests) -> [Generated], its slots decoded together
    [done] = await worker.generate([request])

The model's ``run`` decodes its slots together and gives a finished slot the next request of the
call at once (`dsonet.learn.llama_engine`). So the worker hands it every sequence waiting when it
looks, in one call; sequences that arrive during a call wait for the next one. The model runs one
call at a time anyway (its context is not thread-safe), so one thread is all it needs, and the
event loop never blocks on it: results go back through each caller's loop
(``call_soon_threadsafe``), as streamed pieces do (the caller's ``on_text`` sees to that). A
sequence whose caller went away (a closed connection cancels its future) before the worker took
it is dropped unrun.
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


class Worker:
    def __init__(self, run: Run):
        self.run = run
        self._queue: queue.Queue[_Waiting | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="dso-llm-worker", daemon=True)
        self.running = 0  # sequences in the call being decoded now

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

    def _take(self) -> tuple[list[_Waiting], bool]:
        """Everything waiting (blocking for the first) and whether the queue was closed."""
        first = self._queue.get()
        if first is None:
            return [], True
        batch, closed = [first], False
        while not closed:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                closed = True
            else:
                batch.append(more)
        return [w for w in batch if not w.future.cancelled()], closed

    def _work(self) -> None:
        closed = False
        while not closed:
            batch, closed = self._take()
            if not batch:
                continue
            self.running = len(batch)
            try:
                results = self.run([w.request for w in batch])
            except Exception as exc:  # every caller of the call gets the error; the worker goes on
                log.exception("generation failed for a call of %d sequences", len(batch))
                error = exc if isinstance(exc, LLMError) else LLMError(f"{type(exc).__name__}: {exc}")
                for w in batch:
                    w.settle(error=error)
            else:
                for w, result in zip(batch, results):
                    w.settle(result)
            finally:
                self.running = 0
