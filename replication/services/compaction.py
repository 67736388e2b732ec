"""Log compaction of streams (issue 31): a pass over every partition of a compacted topic,
bounded by what every agreed replica of the stream has received (invariant 10: what a
replica, synchronous or not, has not confirmed is never compacted away before it gets it),
and what it did recorded in the store for `stream info`, the API and the stream page.

A topic is compacted by the rule of its origin stream: an origin with `-compact true`
compacts its topics, and every replica of them compacts its copy with the origin's
settings (the rule depends only on the records and the clock), so a replica ends with the
same latest value per key at the same offsets, whatever it was sent (compacted batches, gaps
included, or the originals)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet

from replication.engine.compaction import kept_view, view_difference
from replication.engine.compactstore import CompactionState, Passes, Policy
from replication.engine.store import Message
from replication.engine.storebase import MessageStore
from replication.models import Stream, Topic
from replication.services.purge import _replica_safe_ends, watermarks
from replication.services.topiccompaction import origin_topics
from replication.stores import store_for

# A running pass notes its progress every few seconds (workers/compaction.py): a note older
# than this is a pass that died.
RUNNING_STALE_MS = 60_000


@dataclass
class CompactionPass:
    """What one pass over a stream did."""

    partitions: int = 0  # partitions compacted (those with something cleanable)
    removed: int = 0  # records removed
    reclaimed: int = 0  # logical bytes removed
    skipped: list[str] = field(default_factory=list)  # why a topic was left alone


def compacted_streams() -> QuerySet[Stream]:
    """Streams with a compacted topic: compacted origins, streams with a topic compacted by
    its own cleanup.policy, and replicas of their topics."""
    origins = Stream.objects.filter(compact=True).values("uuid")
    own = Topic.objects.filter(cleanuppolicy__contains="compact")
    copied = Q(topics__origin_uuid__in=origins) | Q(
        topics__origin_uuid__in=own.values("stream__uuid"), topics__name__in=own.values("name"))
    return Stream.objects.filter(Q(compact=True) | Q(topics__in=own) | copied).distinct()


def _policies(stream: Stream) -> dict[str, Policy]:
    """Each compacted topic of the stream and its policy, as its origin topic has it (a
    replica compacts its copy by the origin's rule)."""
    return {name: Policy(*t.compaction()) for name, t in origin_topics(stream).items()
            if t.compacted}


def stream_compact(*, stream: Stream, now_ms: int | None = None,
                   passes: Passes | None = None) -> CompactionPass:
    """One compaction pass over the stream's compacted topics. `passes`: where the heavy
    passes of the partitions they take run (the worker's Spark job for large ones:
    workers/compaction.py); the domain cannot start Spark (the layers), so the worker hands
    them in."""
    done = CompactionPass()
    policies = _policies(stream)
    if not policies:
        return done
    store = store_for(stream.cluster)
    if not store.KEEPS_BATCHES:
        done.skipped = [f"{name}: the store of cluster {stream.cluster.name} keeps rows; "
                        "compaction needs the batch layout (`manage.py convertstores`)"
                        for name in policies]
        return done
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ends = {(name, p): high for name in policies
            for p, (_low, high) in watermarks(store, stream.uuid, name).items()}
    for (name, partition), end in _replica_safe_ends(stream, ends).items():
        result = store.compact(stream.uuid, name, partition, policy=policies[name],
                               now_ms=now_ms, replicated=end, passes=passes)
        if result.ran:
            done.partitions += 1
            done.removed += result.removed
            done.reclaimed += result.reclaimed
    return done


def compaction_summary(stream: Stream) -> dict[str, Any] | None:
    """What compaction did on the stream so far, for `stream info`, the API and the stream
    page, and the passes running now (each partition's percent done: of its Spark tasks,
    or of its offsets gone through in the worker); None when none of its topics is
    compacted."""
    if not _policies(stream):
        return None
    store = store_for(stream.cluster)
    states: list[CompactionState] = (store.compaction_state(stream.uuid)
                                     if store.KEEPS_BATCHES else [])
    # A pass that died half-way counted what it removed before it died.
    done = [s for s in states if s.runs or s.removed]
    last = max((s.last_run_ms for s in done if s.runs), default=None)
    return {"partitions": len(done), "passes": sum(s.runs for s in done),
            "messagesremoved": sum(s.removed for s in done),
            "bytesreclaimed": sum(s.reclaimed for s in done), "lastrun": last,
            "running": _running(states, int(time.time() * 1000))}


def _running(states: list[CompactionState], now_ms: int) -> list[dict[str, Any]]:
    """Passes whose progress note moved within RUNNING_STALE_MS (an older one died)."""
    return [{"topic": s.topic, "partition": s.partition,
             "percent": 100 * s.running_done // s.running_total}
            for s in states
            if s.running_total and now_ms - s.running_updated_ms < RUNNING_STALE_MS]


def compacted_topics(stream: Stream) -> set[str]:
    """The stream's topics compacted by their origin's setting."""
    return set(_policies(stream))


def compacted_difference(a: Stream, b: Stream, topic: str, partition: int,
                         end: int) -> int | None:
    """Verification of a compacted partition (issue 31): the lowest offset below `end` where
    the two copies' views differ (each key's latest value: `kept_view`), None when they
    agree. Copies compact on their own schedules, so comparing offset by offset would flag
    records one side removed already and the other not yet; the view is what both must
    agree on."""
    views = [kept_view(_messages(store_for(s.cluster), s.uuid, topic, partition, end))
             for s in (a, b)]
    return view_difference(*views)


def _messages(store: MessageStore, stream: UUID, topic: str, partition: int,
              end: int) -> Iterator[Message]:
    marks = watermarks(store, stream, topic)
    offset = marks.get(partition, (0, 0))[0]
    while offset < end:
        batch = [m for m in store.read(stream, topic, partition, offset, limit=10_000)
                 if m.offset < end]
        if not batch:
            return
        yield from batch
        offset = batch[-1].offset + 1
