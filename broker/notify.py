"""In-process wake-ups for long-polling fetches: a produce through this listener wakes the
fetches waiting on that topic at once; data produced elsewhere (REST, another listener, a
gateway applying a replica's batch) is found by the fetch's short poll instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from uuid import UUID

Key = tuple[UUID, str]  # (stream, topic inside it)
_waiting: dict[Key, set[asyncio.Future]] = {}


def data_arrived(stream: UUID, topic: str) -> None:
    """Called on the event loop once a produce to (stream, topic) committed."""
    for future in _waiting.pop((stream, topic), ()):
        if not future.done():
            future.set_result(None)


async def wait_for_data(keys: Iterable[Key], timeout: float) -> bool:
    """Wait up to `timeout` seconds for a produce to any of `keys`; True when one came."""
    future = asyncio.get_running_loop().create_future()
    keys = list(keys)
    for key in keys:
        _waiting.setdefault(key, set()).add(future)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)
        return future.done() and not future.cancelled()
    finally:
        for key in keys:
            waiters = _waiting.get(key)
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    _waiting.pop(key, None)
