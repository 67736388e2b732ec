"""A listener's background loops (its presence beat, the revocation check): a task for as long
as the listener serves."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Self


class Background:
    """An async context manager running `loop` as a task inside its block: `begin` runs
    first, `end` once the task is cancelled."""

    task: asyncio.Task | None = None

    async def begin(self) -> None:
        return None

    async def loop(self) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        await self.begin()
        self.task = asyncio.create_task(self.loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.end()
