"""A loop on a daemon thread for as long as a Spark action runs (a job's progress, the watch
for lost executors)."""

from __future__ import annotations

import threading
from typing import Self


class Background:
    """A context manager running `loop` on a daemon thread inside its block when `begin`
    says so; on exit `stop` is set and the thread joined. `loop` waits on `stop` between
    rounds."""

    name = "background"

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True, name=self.name)

    def begin(self) -> bool:
        """Whether to run the loop (called on entering)."""
        return True

    def loop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        if self.begin():
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
