"""Where two streams' partitions stop holding the same messages: a replica and its origin
(verification), a failed-over pair (failback's common prefix); and copying a link's large
backlog in bulk (failback's catch-up).

The comparison is diffstreams' own (checksums per bucket of offsets on both stores, then row
by row inside the first differing bucket; on batch stores, checksums of batches, then message
by message where they differ: workers/spark/ranges.py `diff_ranges`). The domain
may not import the workers layer, so the workers app registers it here (WorkersConfig.ready):
a few ranges run that pure function in this process, many run it as Spark tasks. The bulk
copy is copystream's, over the link (its chunks advance the link's cursor as they commit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore

if TYPE_CHECKING:
    from replication.models import ReplicaLink, Stream


@dataclass(frozen=True)
class Span:
    """Offsets [start, end) of one partition, to compare on both streams."""

    topic: str
    partition: int
    start: int
    end: int


# (a, b, spans, one per partition) -> {(topic, partition): first differing offset}, absent
# where the span is equal on both.
Differ = Callable[["Stream", "Stream", list[Span]], dict[tuple[str, int], int]]
_differs: list[Differ] = []


def register_differ(differ: Differ) -> None:
    _differs[:] = [differ]


def first_differences(a: Stream, b: Stream, spans: list[Span]) -> list[int]:
    """Per span, the first offset in [start, end) where the two streams differ, or `end`
    when they hold the same messages there (origin, timestamp and producer included)."""
    if not _differs:
        raise RuntimeError("no comparison registered: the workers app registers diffstreams' "
                           "(add 'workers' to INSTALLED_APPS)")
    todo = [s for s in spans if s.end > s.start]
    if len({(s.topic, s.partition) for s in todo}) != len(todo):
        raise ValueError("one span per partition")
    found = _differs[0](a, b, todo) if todo else {}
    return [found.get((s.topic, s.partition), s.end) for s in spans]


Copier = Callable[["ReplicaLink"], int]  # link -> messages copied
_copiers: list[Copier] = []


def register_copier(copier: Copier) -> None:
    _copiers[:] = [copier]


def link_bulk_copy(link: ReplicaLink) -> int:
    """Copy what the link's replica lacks of the topics it carries with copystream's Spark
    tasks, here and now (no Job: the caller waits for it); returns the messages copied."""
    if not _copiers:
        raise RuntimeError("no bulk copy registered: the workers app registers copystream's "
                           "(add 'workers' to INSTALLED_APPS)")
    return _copiers[0](link)


def marks_of(store: MessageStore, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (low, high); {} for a topic the store has not heard of."""
    try:
        return store.watermarks(stream, topic)
    except UnknownTopic:
        return {}
