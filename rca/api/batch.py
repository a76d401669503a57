"""Group commit: requests that arrive while the database is busy are stored together.

Under load, most of a webhook's cost was what every transaction pays once (taking a pooled
connection, BEGIN and COMMIT, handing the work to a thread and back, a statement per table) and not
what it stores. A `Batcher` runs at most `concurrency` batches at a time in threads; a request
that arrives while they are all busy waits for the next one, which takes everything waiting (up to
`max_items`, or `max_weight` alerts). Alone, a request is a batch of one and waits for nothing, so
a quiet service answers as fast as before; under a storm, batches grow until one transaction
carries dozens of webhooks.

Each request still gets its own answer: `run` returns one outcome per item, a result or the
exception that item raised, and the caller answers from it (rca/api/webhook.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Batcher(Generic[T, R]):
    """Runs `run(items)` in a worker thread for whatever is waiting, at most `concurrency` at a time."""

    run: Callable[[Sequence[T]], Sequence[R | BaseException]]
    concurrency: int
    max_items: int
    max_weight: int
    weight: Callable[[T], int] = lambda _item: 1
    _waiting: list[tuple[T, asyncio.Future[R]]] = field(default_factory=list)
    _running: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def submit(self, item: T) -> R:
        """The outcome of `item`, stored in whichever batch takes it; raises what it raised."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._start()
        return await future

    def _start(self) -> None:
        while self._waiting and self._running < self.concurrency:
            taken, weight = 0, 0
            for item, _ in self._waiting:
                weight += self.weight(item)
                if taken and (taken == self.max_items or weight > self.max_weight):
                    break
                taken += 1
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
            self._running += 1
            task = asyncio.create_task(self._store(batch))
            self._tasks.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self._tasks.discard)

    async def _store(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            outcomes: Sequence[R | BaseException] = await anyio.to_thread.run_sync(
                self.run, [item for item, _ in batch]
            )
        except Exception as exc:  # `run` answers per item: this is a bug, and every request of the batch says so
            outcomes = [exc] * len(batch)
        finally:
            self._running -= 1
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # the request went away (client disconnected); what it sent is stored
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._start()
