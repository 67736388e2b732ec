"""How log compaction (issue 31) keeps out of the producers' way on a shared host: a throttle
on the bytes a pass reads and writes (Kafka's `log.cleaner.io.max.bytes.per.second`) and a
lower CPU priority for the thread doing it (`nice`). Both are the operator's settings
(STREAMGATE_COMPACT_MAX_BYTES_PER_SEC, STREAMGATE_COMPACT_NICE: portal/settings.py), handed
to the store's `compact` and, shared out between its tasks, to a Spark pass's tasks."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, TypeVar

T = TypeVar("T")
# Credit a pace keeps for time it spent idle (waiting on a lock, or for PostgreSQL): this much
# at most, so a pass that was held up catches up in short bursts, never in one long one.
BURST_SECONDS = 0.1
# A paced pass's unit of work (a page read, a chunk of batches written under the partition's
# lock) is what its rate spends in this long: a producer beside it waits for one such burst
# at most (~2 ms at 32 MiB/s of 110 KB batches), where a page of 500 batches (~60 MB) ran
# at full speed for a quarter of a second before the pace slept it off.
STEP_SECONDS = 0.02


class Pacing(NamedTuple):
    """A pass's pace: `max_bytes_per_sec` read and written together (0: unlimited), and its
    thread's niceness raised by `nice` (0: left alone)."""

    max_bytes_per_sec: float = 0
    nice: int = 0

    def shared(self, tasks: int) -> Pacing:
        """Each of `tasks` running at once takes an equal share of the rate, so together they
        keep to it."""
        return self._replace(max_bytes_per_sec=self.max_bytes_per_sec / max(1, tasks))


UNPACED = Pacing()


class Pace:
    """Sleeps the caller so the bytes it reports (`spent`) keep to `rate` a second over its
    life (0: never sleeps)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.due = time.monotonic()  # when what was spent so far is paid for

    def step(self, most: int, size: float) -> int:
        """How many items of `size` bytes each (on average) one unit of work takes: `most`
        unpaced; paced, what the rate spends in STEP_SECONDS, one at least (one while `size`
        is not known yet)."""
        if self.rate <= 0:
            return most
        return max(1, min(most, int(self.rate * STEP_SECONDS / size) if size > 0 else 1))

    def spent(self, n: int) -> None:
        if self.rate <= 0 or n <= 0:
            return
        now = time.monotonic()
        self.due = max(self.due, now - BURST_SECONDS) + n / self.rate
        if self.due > now:
            time.sleep(self.due - now)


def niced(nice: int, work: Callable[[], T]) -> T:
    """`work()`'s result, run on a thread of its own whose niceness is raised by `nice`: the
    thread ends with it, so the caller (a Celery worker's process, a reused Spark Python
    worker) keeps its own priority for what it runs next (an unprivileged process cannot take
    a lower niceness back). Linux only (a thread's own niceness); elsewhere `work()` as is."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return work()
    with ThreadPoolExecutor(1, thread_name_prefix="niced") as pool:
        return pool.submit(_at_nice, nice, work).result()


def _at_nice(nice: int, work: Callable[[], T]) -> T:
    me = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))
    return work()
