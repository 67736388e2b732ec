"""What a replicator receives: wake-ups (streams with new data) and its gateways'
acknowledgements, each replicator its own (so two replicators, say while one is being replaced,
never take each other's). In Redis, per replicator id: a set of woken streams `sg:dirty:<id>`
with a one-slot list `sg:signal:<id>` to block on, and a list of acknowledgements
`sg:acks:<id>`; in embedded mode, `LocalMailbox` in this process's memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass
class Signals:
    """What woke the replicator: batch results, and streams with new data."""

    acks: list[dict[str, Any]] = field(default_factory=list)
    streams: set[str] = field(default_factory=set)


class InboxKeys(NamedTuple):
    signal: str
    dirty: str
    acks: str


def inbox_keys(prefix: str, inbox: str) -> InboxKeys:
    own = f":{inbox}" if inbox else ""
    return InboxKeys(*(f"{prefix}sg:{kind}{own}" for kind in ("signal", "dirty", "acks")))


class LocalMailbox:
    """Every replicator's wake-ups and acknowledgements in this process, under one condition
    the replicators wait on."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.acks: dict[str, list[dict[str, Any]]] = {}
        self.dirty: dict[str, set[str]] = {}  # per live replicator

    def wake(self, replicators: list[str], streams: set[str]) -> None:
        with self.cond:
            for replicator in replicators:
                self.dirty.setdefault(replicator, set()).update(streams)
            self.cond.notify_all()

    def ack(self, results: list[dict[str, Any]], inbox: str) -> None:
        with self.cond:
            self.acks.setdefault(inbox, []).extend(results)
            self.cond.notify_all()

    def take(self, inbox: str, timeout: float) -> Signals:
        with self.cond:
            if not self.acks.get(inbox) and not self.dirty.get(inbox):
                self.cond.wait(timeout)
            return Signals(self.acks.pop(inbox, []), self.dirty.pop(inbox, set()))
