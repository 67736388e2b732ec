"""Acknowledgements: a gateway that applied a batch tells the replicator that sent it (on the
sender's own list, `sg:acks:<inbox>`, mailbox.py), tells the producers waiting for synchronous
replicas (replication/services/sync.py) by publishing the link's id on `sg:applied:<link>`, and
wakes the replicators of a replica that feeds links of its own, all in one round trip. Each
process listens to the "applied" channels with one pattern subscription (`AppliedListener`),
whatever the number of producers waiting in it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

import redis
import structlog

from replication.transport.client import SIGNAL_TTL
from replication.transport.mailbox import LocalMailbox, inbox_keys
from replication.transport.wakeups import LocalWakeUps, RedisWakeUps

log = structlog.get_logger(__name__)


class Acknowledgements(Protocol):
    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        """A gateway's batch is done: acknowledge each result to `inbox`, tell the producers
        waiting for the `applied` links, `wake` the streams, all at once."""
        ...

    def applied_board(self) -> AppliedBoard:
        """Where this process learns of applied batches, ready to be watched."""
        ...


class AppliedBoard:
    """A counter per link, bumped for each "applied" notification this process hears.

    A waiter takes a snapshot before it reads the replica's ends and sleeps until a counter
    moves past it, so a batch applied between the read and the sleep is never missed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._counts: dict[str, int] = {}
        self._generation = 0  # bumped on a listener reconnect: anything may have been missed

    def bump(self, links: Iterable[str]) -> None:
        with self._cond:
            for link in links:
                self._counts[link] = self._counts.get(link, 0) + 1
            self._cond.notify_all()

    def bump_all(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def snapshot(self, links: Iterable[str]) -> tuple[int, ...]:
        with self._cond:
            return (self._generation, *(self._counts.get(link, 0) for link in links))

    def wait(self, links: list[str], seen: tuple[int, ...], timeout: float) -> bool:
        """Until a link's counter moves past `seen` (True) or `timeout` seconds pass."""
        with self._cond:
            return self._cond.wait_for(lambda: self._moved(links, seen), timeout)

    def _moved(self, links: list[str], seen: tuple[int, ...]) -> bool:
        return (self._generation, *(self._counts.get(link, 0) for link in links)) != seen


class AppliedListener:
    """One thread per process holding a pattern subscription to the "applied" channels and
    bumping the board; it reconnects by itself (waiters fall back on their re-checks meanwhile).
    """

    def __init__(self, client: redis.Redis, pattern: str) -> None:
        self.client, self.pattern = client, pattern
        self.board = AppliedBoard()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="applied-listener", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        prefix = len(self.pattern) - 1  # the channel name up to the "*"
        while True:
            try:
                with self.client.pubsub() as pubsub:
                    pubsub.psubscribe(self.pattern)
                    for message in pubsub.listen():
                        if message["type"] == "psubscribe":
                            self.ready.set()
                        elif message["type"] == "pmessage":
                            self.board.bump([message["channel"].decode()[prefix:]])
            except Exception as error:  # Redis restarting: subscribe again
                self.ready.clear()
                self.board.bump_all()
                log.warning("applied_listener_failed", error=str(error))
                time.sleep(0.5)


_listeners: dict[tuple[int, str], AppliedListener] = {}
_listeners_lock = threading.Lock()


class RedisAcks:
    def __init__(self, client: redis.Redis, prefix: str, wakeups: RedisWakeUps) -> None:
        self.client, self.prefix, self.wakeups = client, prefix, wakeups

    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        if wake:
            self.wakeups.queue(pipe, wake)
        for link in applied:
            pipe.publish(f"{self.prefix}sg:applied:{link}", 1)
        if acks:
            key = inbox_keys(self.prefix, inbox).acks
            pipe.rpush(key, *(json.dumps(a) for a in acks)).expire(key, SIGNAL_TTL)
        pipe.execute()

    def applied_board(self) -> AppliedBoard:
        pattern = f"{self.prefix}sg:applied:*"
        key = (os.getpid(), pattern)  # a forked child needs a listener thread of its own
        with _listeners_lock:
            listener = _listeners.get(key)
            if listener is None:
                listener = _listeners[key] = AppliedListener(self.client, pattern)
        # Subscribed before the first read of the replica's ends, or a notification could
        # fall between the two; if Redis is slow to answer, the waiter's re-checks cover it.
        listener.ready.wait(1.0)
        return listener.board


class LocalAcks:
    def __init__(self, mailbox: LocalMailbox, wakeups: LocalWakeUps) -> None:
        self.mailbox, self.wakeups = mailbox, wakeups
        self._board = AppliedBoard()

    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        if wake:
            self.wakeups.wake(wake)
        self._board.bump(str(link) for link in applied)
        if acks:
            self.mailbox.ack(acks, inbox)

    def applied_board(self) -> AppliedBoard:
        return self._board
