"""Dynamic micro-batching: requests that arrive while a batch is being scored form the next batch.

One batch is in flight at a time, on a worker thread of its own, so the event loop keeps reading and answering
HTTP while the batch waits on the online store. Under light load a batch is one request (nothing waits for
a timer); under concurrency the store round trip, the encoding and the forward pass are paid once per
batch instead of once per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Collects submitted items and hands them to ``process`` (on one worker thread) in batches."""

    def __init__(
        self,
        process: Callable[[Sequence[T]], Sequence[R]],
        max_items: int = 64,
        thread_initializer: Callable[[], None] | None = None,
    ) -> None:
        self._process = process
        self._max_items = max_items
        self._initializer = thread_initializer
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._running = False
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """The result for ``item`` (or its batch's exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if not self._running:
            self._running = True
            self._task = loop.create_task(self._run())  # keep a reference: the loop holds tasks weakly
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="batch", initializer=self._initializer)
        try:
            await asyncio.sleep(0)  # let the requests of this loop turn join the first batch
            while self._pending:
                chunk, self._pending = self._pending[: self._max_items], self._pending[self._max_items :]
                try:
                    results = await loop.run_in_executor(self._executor, self._process, [i for i, _ in chunk])
                except Exception as exc:  # every request of the batch gets the batch's error
                    for _, future in chunk:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(chunk, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._running = False

    def close(self) -> None:
        """Stop the worker thread (after the batch in flight)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
