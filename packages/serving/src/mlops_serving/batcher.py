"""Dynamic micro-batching: requests that arrive while a batch is being scored form the next batch.

One batch is in flight at a time. Its ``process`` is a coroutine on the event loop: what waits on I/O (the
online store's round trip) runs on a thread of its own and is awaited, so the loop keeps reading and answering
HTTP meanwhile, and the CPU work of the batch (encode, forward, metrics, log rows) runs on the loop with no
hand-over to another thread (under the GIL a thread buys no parallelism for it, only a wake-up per batch).
Under light load a batch is one request (nothing waits for a timer); under concurrency the store round trip,
the encoding and the forward pass are paid once per batch instead of once per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Collects submitted items and hands them to ``process`` (a coroutine function) in batches."""

    def __init__(self, process: Callable[[Sequence[T]], Awaitable[Sequence[R]]], max_items: int = 64) -> None:
        self._process = process
        self._max_items = max_items
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
        try:
            await asyncio.sleep(0)  # let the requests of this loop turn join the first batch
            while self._pending:
                chunk, self._pending = self._pending[: self._max_items], self._pending[self._max_items :]
                try:
                    results = await self._process([i for i, _ in chunk])
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
        """Nothing to stop: batches run on the event loop (kept for the model's shutdown sequence)."""
