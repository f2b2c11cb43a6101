"""The System Under Test's front: a queue of the samples LoadGen issued and one thread that takes
up to `max_batch` of them, waiting at most `max_delay_ms` after the oldest arrived, runs the
engine's query once for them and completes them.

The engine is the cell's built engine, bound to inputs of its batch (a QueryFn, as the offline
timing loop calls it): a batch of fewer samples runs padded to that batch, as an engine built for
one shape (a CUDA graph, a TensorRT profile of one size) runs it. What the batcher itself costs is
timed beside the engine, so that a serving figure can be held against the offline cell's."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable

from farm.records import QueryFn


@dataclasses.dataclass
class BatchStats:
    """What the batcher saw over one run (times in milliseconds)."""

    batch_sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # samples a batch -> batches
    queue_ms: list[float] = dataclasses.field(default_factory=list)  # each sample: arrival to its batch's start
    engine_ms: list[float] = dataclasses.field(default_factory=list)  # each batch: the engine's query
    overhead_ms: list[float] = dataclasses.field(default_factory=list)  # each batch: forming it + completing it
    served: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # each sample: arrival (s), ms to completion
    error: str | None = None  # the engine's first error: the samples after it were completed unrun

    def p99_by_second(self) -> list[float | None]:
        """p99 (ms) of the samples that arrived in each second of the run, from the first arrival, issue
        to completion (queue, batch, engine); None for a second with none: whether a test's slow
        samples came in one burst or throughout."""
        if not self.served:
            return []
        start = min(arrived for arrived, _ in self.served)
        seconds: dict[int, list[float]] = collections.defaultdict(list)
        for arrived, ms in self.served:
            seconds[int(arrived - start)].append(ms)
        return [p99(seconds[k]) if k in seconds else None for k in range(max(seconds) + 1)]


def p99(values: list[float]) -> float | None:
    """The 99th percentile (the nearest rank below), None for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None


class DynamicBatcher:
    """Samples in, completed samples out: `issue` (LoadGen's issue callback: it only enqueues),
    `complete(ids)` called from the batcher's thread once the engine ran them."""

    def __init__(self, query: QueryFn, max_batch: int, max_delay_ms: float,
                 complete: Callable[[list[int]], None]) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch {max_batch}: give 1 or more")
        self.query, self.max_batch, self.max_delay_s = query, max_batch, max(0.0, max_delay_ms) / 1000
        self.complete = complete
        self.stats = BatchStats()
        self._queue: collections.deque[tuple[int, float]] = collections.deque()
        self._ready = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.stats = BatchStats()
        self._running = True
        self._thread = threading.Thread(target=self._serve, name="farm-batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Serve what is queued, then end the thread."""
        with self._ready:
            self._running = False
            self._ready.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def issue(self, ids: list[int]) -> None:
        now = time.perf_counter()
        with self._ready:
            self._queue.extend((i, now) for i in ids)
            self._ready.notify_all()

    def _next_batch(self) -> list[tuple[int, float]] | None:
        with self._ready:
            while not self._queue and self._running:
                self._ready.wait()
            if not self._queue:
                return None  # stopped, nothing left
            deadline = self._queue[0][1] + self.max_delay_s
            while len(self._queue) < self.max_batch and self._running:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._ready.wait(left)
            return [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]

    def _serve(self) -> None:
        stats = self.stats
        while (batch := self._next_batch()) is not None:
            formed = time.perf_counter()
            start = formed
            if stats.error is None:
                try:
                    start = time.perf_counter()
                    self.query()
                except Exception as exc:  # noqa: BLE001 - every sample is completed all the same: LoadGen waits for each
                    stats.error = f"{type(exc).__name__}: {exc}"[:500]
            end = time.perf_counter()
            self.complete([i for i, _ in batch])
            done = time.perf_counter()
            stats.batch_sizes[len(batch)] += 1
            stats.queue_ms.extend((start - arrived) * 1000 for _, arrived in batch)
            stats.served.extend((arrived, (done - arrived) * 1000) for _, arrived in batch)
            stats.engine_ms.append((end - start) * 1000)
            stats.overhead_ms.append(((start - formed) + (done - end)) * 1000)
