"""Comparing one partition on two stores, message by message: where a replica and its origin
(or a failed-over pair) stop holding the same messages. Used by failback and verification."""

from __future__ import annotations

from uuid import UUID

from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore

READ_LIMIT = 5000


def marks_of(store: MessageStore, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (low, high); {} for a topic the store has not heard of."""
    try:
        return store.watermarks(stream, topic)
    except UnknownTopic:
        return {}


def first_difference(a: MessageStore, a_uuid: UUID, b: MessageStore, b_uuid: UUID, topic: str,
                     partition: int, start: int, stop: int) -> int:
    """The first offset in [start, stop) where the two partitions differ (stop when none):
    both copies of a replicated message are the same message, origin and timestamp too."""
    offset = start
    while offset < stop:
        left = a.read(a_uuid, topic, partition, offset, limit=min(READ_LIMIT, stop - offset))
        right = b.read(b_uuid, topic, partition, offset, limit=len(left) or 1)
        for x, y in zip(left, right, strict=False):
            if x != y:
                return x.offset
        if not left or len(right) < len(left):
            return offset + len(right)
        offset = left[-1].offset + 1
    return stop
