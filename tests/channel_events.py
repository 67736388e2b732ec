"""Listening to the browser events as a page's socket would: a channel of the test's own on
production's channel layer (Redis pub/sub), joined to tenant groups.

The pub/sub layer hands a message only to channels subscribed when it is published, and only
while their reader runs in a live event loop; each async_to_sync call runs a loop that ends
with the call. So an `Events` keeps one loop in a thread of its own for its lifetime: its
subscriptions and a reader live there, and whatever arrives waits here until it is taken."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

import orjson
from channels.layers import get_channel_layer

from portal.settings import channel_layers
from replication.events import tenant_group

T = TypeVar("T")
QUIET = 0.3  # drain(): this long without an event and the burst has ended
TIMEOUT = 10.0  # for one operation on the listening loop (subscribe, stop)

Event = tuple[str, dict]


def use_redis_layer(settings: Any, prefix: str) -> None:
    """Production's CHANNEL_LAYERS under `prefix`: test runs share one Redis (and tenant ids),
    so each listens and publishes under a prefix of its own. Processes started with the same
    STREAMGATE_NAMESPACE use `<namespace>asgi`."""
    assert settings.REDIS_URL, "event tests use the real Redis channel layer"
    settings.CHANNEL_LAYERS = channel_layers(settings.REDIS_URL, prefix)


class Events:
    """A channel on the settings' channel layer; close() ends it (or use it in `with`)."""

    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self._got: list[Event] = []
        self._arrived = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name="channel-events")
        self._thread.start()
        # Made on the listening loop: the pub/sub layer keeps channels per event loop, and
        # group_add accepts only a channel of its own loop.
        self.channel: str = self._call(self.layer.new_channel())
        self._reader: asyncio.Task[None] = self._call(self._start_reading())

    def join(self, tenant_id: int) -> None:
        # Returns once the layer has sent SUBSCRIBE for the group: anything the test causes
        # afterwards is published to a subscription in place.
        self._call(self.layer.group_add(tenant_group(tenant_id), self.channel))

    def collect(self, seconds: float) -> list[Event]:
        """(event, payload) of every event that arrived since the last collect or drain, after
        waiting `seconds` for more."""
        time.sleep(seconds)
        with self._arrived:
            return self._take()

    def drain(self) -> list[Event]:
        """(event, payload) of every event that arrived, once none has come for QUIET s."""
        with self._arrived:
            while self._arrived.wait(QUIET):
                pass
            return self._take()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._stop_reading())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)

    def __enter__(self) -> Events:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            # channels-redis hooks the loop's close to flush its layer there: the connection
            # (and with it every subscription) ends.
            self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(TIMEOUT)

    async def _start_reading(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            with self._arrived:
                event = orjson.loads(message["text"])
                self._got.append((event["event"], event["payload"]))
                self._arrived.notify_all()

    async def _stop_reading(self) -> None:
        # Cancelled, receive() unsubscribes the channel before the loop stops.
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    def _take(self) -> list[Event]:
        if self._reader.done() and not self._reader.cancelled():
            self._reader.result()  # the reader failed: say why rather than return nothing
        got, self._got = self._got, []
        return got
