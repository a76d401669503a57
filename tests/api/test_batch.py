"""Group commit (rca/api/batch.py): a lone request runs at once, requests that arrive while every
batch is busy wait and go together, within the bounds, and each gets its own outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from rca.api.batch import Batcher


class Store:
    """A `run` that records each batch and holds it until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def __call__(self, items: Sequence[str]) -> list[str | BaseException]:
        self.batches.append(list(items))
        self.started.release()
        self.release.wait(10)
        return [ValueError(item) if item.startswith("bad") else item.upper() for item in items]


async def started(store: Store, count: int) -> None:
    for _ in range(count):
        assert await asyncio.to_thread(store.started.acquire, True, 10)


def test_a_lone_request_is_a_batch_of_one_and_waits_for_nothing() -> None:
    store = Store()
    store.release.set()

    async def main() -> list[str]:
        batcher: Batcher[str, str] = Batcher(store, concurrency=2, max_items=10, max_weight=100)
        return [await batcher.submit("a"), await batcher.submit("b")]

    assert asyncio.run(main()) == ["A", "B"]
    assert store.batches == [["a"], ["b"]]


def test_requests_that_arrive_while_every_batch_is_busy_go_together_within_the_bounds() -> None:
    store = Store()

    async def main() -> list[str | BaseException]:
        batcher: Batcher[str, str] = Batcher(
            store, concurrency=2, max_items=4, max_weight=5, weight=lambda item: 5 if item == "heavy" else 1
        )
        first = [asyncio.create_task(batcher.submit(item)) for item in ("a", "b")]
        await started(store, 2)  # both batches busy: the rest wait
        waiting = ["c", "bad-d", "e", "f", "g", "heavy", "h"]
        rest = [asyncio.create_task(batcher.submit(item)) for item in waiting]
        await asyncio.sleep(0.05)
        assert len(store.batches) == 2
        store.release.set()
        return await asyncio.gather(*first, *rest, return_exceptions=True)

    outcomes = asyncio.run(main())

    assert outcomes[:3] == ["A", "B", "C"]
    assert isinstance(outcomes[3], ValueError) and str(outcomes[3]) == "bad-d"  # its own error, to it alone
    assert outcomes[4:] == ["E", "F", "G", "HEAVY", "H"]
    # four at most, and no more weight than 5 unless alone: "heavy" goes in a batch of its own
    assert sorted(store.batches[:2]) == [["a"], ["b"]]  # their two threads start in either order
    assert sorted(store.batches[2:]) == [["c", "bad-d", "e", "f"], ["g"], ["h"], ["heavy"]]


def test_a_batch_whose_run_fails_fails_its_requests_and_the_next_batch_runs() -> None:
    calls: list[list[str]] = []

    def run(items: Sequence[str]) -> list[str | BaseException]:
        calls.append(list(items))
        if "boom" in items:
            raise RuntimeError("bug")
        return [item.upper() for item in items]

    async def main() -> list[str | BaseException]:
        batcher: Batcher[str, str] = Batcher(run, concurrency=1, max_items=10, max_weight=10)
        failed = await asyncio.gather(batcher.submit("boom"), return_exceptions=True)
        return [*failed, await batcher.submit("ok")]

    failed, ok = asyncio.run(main())
    assert isinstance(failed, RuntimeError) and ok == "OK"
    assert calls == [["boom"], ["ok"]]
