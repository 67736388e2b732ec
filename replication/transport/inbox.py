"""The replicator's wait: its wake-ups and acknowledgements (mailbox.py) in one blocking
pop, with the batches its last step cut sent in the same round trip. In Redis that is one
BLMPOP (Redis 7) on its signal and acknowledgement lists, so an idle deployment costs one
blocked connection, and a burst of produces costs one signal."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

import redis

from replication.transport.batchqueue import LocalBatches, RedisBatches, Sent
from replication.transport.mailbox import LocalMailbox, Signals, inbox_keys

# Redis times blocking commands out on its timer, 100 ms a tick at its default hz 10: waits
# shorter than that poll instead (RedisInbox._poll).
REDIS_TICK = 0.1
POLL_SECONDS = 0.002


class Inbox(Protocol):
    def wait(self, timeout: float, inbox: str = "", sending: Sent = ()) -> Signals:
        """Send `sending` (batch_queue), then the signals for `inbox`, waiting up to `timeout`
        seconds for the first."""
        ...


class RedisInbox:
    def __init__(self, client: redis.Redis, prefix: str, batches: RedisBatches) -> None:
        self.client, self.prefix, self.batches = client, prefix, batches

    def wait(self, timeout: float, inbox: str = "", sending: Sent = ()) -> Signals:
        signals = Signals()
        signal, dirty, acks = inbox_keys(self.prefix, inbox)
        # One round trip whatever comes: the wake-ups' streams and the rest of the
        # acknowledgements are popped right after the blocking pop returns. Streams popped
        # with acknowledgements leave their signal behind: the next wait returns at once,
        # with nothing new.
        pipe, sending = self.client.pipeline(transaction=False), list(sending)
        self.batches.queue(pipe, sending)
        if timeout >= REDIS_TICK:
            pipe.blmpop(timeout, 2, signal, acks, direction="LEFT", count=10_000)
            popped, streams, acked = pipe.spop(dirty, 100_000).lpop(acks, 10_000).execute()[-3:]
        else:
            popped, streams, acked = self._poll(pipe, time.monotonic() + timeout, signal, dirty,
                                                acks, at_once=bool(sending))
        if popped and popped[0].decode() == acks:
            acked = [*popped[1], *(acked or ())]
        signals.acks = [json.loads(a) for a in acked or ()]
        signals.streams = {s.decode() for s in streams or ()}
        return signals

    def _poll(self, pipe: Any, deadline: float, signal: str, dirty: str, acks: str, *,
              at_once: bool) -> tuple[Any, Any, Any]:
        """A wait shorter than Redis's timer tick (the linger): Redis times a blocking pop out
        only at its next tick, so a BLMPOP of 2 ms returned after up to 100 ms. Sleeps here
        instead and pops without blocking, every POLL_SECONDS until something comes or the
        time is up; the pipeline goes at once when it carries batches (`at_once`)."""
        while True:
            if (left := deadline - time.monotonic()) > 0 and not at_once:
                time.sleep(min(left, POLL_SECONDS))
            at_once = False
            pipe.lmpop(2, signal, acks, direction="LEFT", count=10_000)
            popped, streams, acked = pipe.spop(dirty, 100_000).lpop(acks, 10_000).execute()[-3:]
            if popped or streams or acked or deadline <= time.monotonic():
                return popped, streams, acked
            pipe = self.client.pipeline(transaction=False)


class LocalInbox:
    def __init__(self, mailbox: LocalMailbox, batches: LocalBatches) -> None:
        self.mailbox, self.batches = mailbox, batches

    def wait(self, timeout: float, inbox: str = "", sending: Sent = ()) -> Signals:
        # The batches apply in this process as they are sent: their acknowledgements are in
        # the mailbox before the wait looks.
        self.batches.send(sending)
        return self.mailbox.take(inbox, timeout)
