"""Failback: the old source of a failover comes back and joins the promoted stream again,
without a full recopy and without losing a message (issue 16).

Per partition of each topic the failover switched: the common prefix of the two streams (the
replica's end at the switch, verified on both stores), then the old source's divergent tail
(produced there, never replicated) is kept aside in a divergence topic of the old source
(`<topic>.diverged`, the original partition, offset and timestamp in headers) before the old
source is cut back to the common prefix; it then receives what was produced on the promoted
stream since, over a link promoted -> old source (the gateways and, for large gaps, the Spark
catch-up the replicator hands big backlogs to; this process applies what is left). Finally a
planned failover switches back (producers of the promoted stream stopped, drained, swapped) and
the links the failover ended come back; with `reverse=True` the old source stays a replica of
the promoted stream instead. `dryrun=True` reports per partition and changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from replication.engine.store import Record
from replication.engine.storebase import MessageStore
from replication.errors import Conflict, InvalidInput
from replication.models import Compression, Failover, ReplicaLink, Stream, Topic, Upstream
from replication.paths import validate_topic_name
from replication.services.common import check_origins, next_idx, propagate_topics, topology_lock
from replication.services.compare import Span, first_differences, link_bulk_copy, marks_of
from replication.services.failover import (
    LINK_FIELDS,
    downstream_of,
    link_drain,
    planned_failover,
    reorigin,
)
from replication.services.topics import topic_autocreate
from replication.services.wakeups import stream_wake
from replication.stores import store_for

DIVERGED_SUFFIX = ".diverged"
HEADER = "streamgate.original."  # headers of a kept-aside message: where it was
VERIFY_WINDOW = 100  # messages before the common prefix compared on both sides


@dataclass
class PartitionPlan:
    topic: str
    partition: int
    commonPrefix: int  # camelCase: the names maprcli-style JSON shows
    keepAside: int
    copy: int
    sourceEnd: int
    promotedEnd: int


def diverged_name(topic: str) -> str:
    return validate_topic_name(f"{topic}{DIVERGED_SUFFIX}")


def replica_failback(
    *, source: Stream, replica: Stream, dryrun: bool = False, reverse: bool = False,
    actor: AbstractBaseUser,
) -> dict[str, Any]:
    """Bring `source` (the old source) back beside `replica` (the stream that took over)."""
    failover = _failover_of(source, replica)
    source.require(actor, "adminperm", action="fail back")
    replica.require(actor, "adminperm", action="fail back")
    _check_fenced(failover, source, replica)
    plans = failback_plan(failover, source, replica)
    report = _report(plans, dryrun=dryrun, reverse=reverse)
    if dryrun:
        return report
    src = store_for(source.cluster)
    for plan in plans:
        if plan.keepAside > 0:  # kept before it is cut: nothing is deleted without a copy
            report["keptAside"] += _keep_aside(src, source, failover, plan)
            src.truncate(source.uuid, plan.topic, plan.partition, plan.commonPrefix)
    link = _reverse(failover, source, replica, actor)
    if report["toCopy"] > settings.BULK_IN_PROCESS:
        link_bulk_copy(link)  # a large gap by the Spark copy; the drain below, the rest
    link_drain(link, why=f"{source.path} stays a replica of {replica.path}; fail back again")
    if not reverse:
        planned_failover(link=link, actor=actor, topics=failover.topics)
        _restore(failover, source, replica, actor)
    _done(failover, report)
    return report


# --- checks ----------------------------------------------------------------------------------


def _failover_of(source: Stream, replica: Stream) -> Failover:
    failover = (Failover.objects.filter(replica=replica, source=source, failed_back_at=None)
                .order_by("-at").first())
    if failover is None:
        took = sorted(set(Failover.objects.filter(replica=replica, failed_back_at=None)
                          .values_list("source_path", flat=True)))
        hint = (f"it took over from {', '.join(took)}" if took else "it never took over from "
                "any stream")
        raise InvalidInput(f"{replica.path} did not take over from {source.path} ({hint}): a "
                           "failback brings back the source a failover left", field="path")
    return failover


def _check_fenced(failover: Failover, source: Stream, replica: Stream) -> None:
    # Producers writing to both would make the tail to keep aside grow under the failback. A
    # failback that failed after making the old source a replica (its drain) reopened the
    # source, whose switched topics refuse producers there all the same (their origin is the
    # promoted stream): run again, it goes on.
    reversed_ = bool(failover.topics) and not source.topics.filter(
        name__in=failover.topics).exclude(origin_uuid=replica.uuid).exists()
    if not reversed_ and not Stream.objects.filter(pk=source.pk).exclude(
            producers_stopped="").exists():
        raise Conflict(f"producers write to {source.path} again, as well as to {replica.path}: "
                       f"stop them on {source.path} before failing back", field="path")
    if not store_reachable(source):
        raise Conflict(f"the store of {source.path} (cluster {source.cluster.name}) does not "
                       "answer: a failback needs the old source back", field="path")


def store_reachable(stream: Stream) -> bool:
    try:
        store_for(stream.cluster).sizes(stream.uuid)
    except Exception:  # any failure to answer is what is asked about
        return False
    return True


# --- the plan ----------------------------------------------------------------------------------


def failback_plan(failover: Failover, source: Stream, replica: Stream) -> list[PartitionPlan]:
    """Per partition, the common prefix, found by diffstreams' comparison: first over a window
    around the replica's end at the failover (where it should be); where the two differ
    already at that window's start (no record, or a record that does not hold), over the
    whole prefix below it."""
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    hints = {(p["topic"], p["partition"]): p["replicaEnd"] for p in failover.partitions}
    parts: list[_Part] = []
    for topic in failover.topics:
        a, b = marks_of(src, source.uuid, topic), marks_of(dst, replica.uuid, topic)
        for partition in sorted(set(a) | set(b)):
            (a_low, a_high), (b_low, b_high) = a.get(partition, (0, 0)), b.get(partition, (0, 0))
            low = max(a_low, b_low)
            hint = min(hints.get((topic, partition), a_high), a_high, b_high)
            parts.append(_Part(topic, partition, low, max(low, hint - VERIFY_WINDOW), a_high,
                               b_high))
    common = first_differences(source, replica, [
        Span(p.topic, p.partition, p.start, min(p.a_high, p.b_high)) for p in parts])
    below = [i for i, p in enumerate(parts) if common[i] == p.start > p.low]
    found = first_differences(source, replica, [
        Span(parts[i].topic, parts[i].partition, parts[i].low, parts[i].start) for i in below])
    for i, offset in zip(below, found, strict=True):
        common[i] = offset
    return [PartitionPlan(p.topic, p.partition, c, p.a_high - c, p.b_high - c, p.a_high,
                          p.b_high) for p, c in zip(parts, common, strict=True)]


class _Part(NamedTuple):
    topic: str
    partition: int
    low: int  # the first offset both hold
    start: int  # where the window around the failover's record begins
    a_high: int
    b_high: int


def _report(plans: list[PartitionPlan], *, dryrun: bool, reverse: bool) -> dict[str, Any]:
    keep = sum(p.keepAside for p in plans)
    copy = sum(p.copy for p in plans)
    seconds = (copy / settings.FAILBACK_COPY_RATE + keep / settings.FAILBACK_KEEP_RATE)
    return {"dryrun": dryrun, "reverse": reverse, "partitions": [asdict(p) for p in plans],
            "toKeepAside": keep, "toCopy": copy, "estimatedSeconds": round(seconds, 6),
            "keptAside": 0}


# --- keeping the divergent tail ----------------------------------------------------------------


def _keep_aside(src: MessageStore, source: Stream, failover: Failover,
                plan: PartitionPlan) -> int:
    """Append the partition's divergent tail to the divergence topic; idempotent: a failback
    run again after a crash continues after the last message it kept."""
    if plan.keepAside <= 0:
        return 0
    name = diverged_name(plan.topic)
    partitions = Topic.objects.get(stream=source, name=plan.topic).partitions
    if not source.topics.filter(name=name).exists():
        topic_autocreate(stream=source, name=name, partitions=partitions, within_plan=False)
    src.ensure_topic(source.uuid, name, partitions)
    offset, kept = max(plan.commonPrefix, _kept_upto(src, source, name, plan, failover)), 0
    while offset < plan.sourceEnd:
        batch = src.read(source.uuid, plan.topic, plan.partition, offset,
                         limit=min(5000, plan.sourceEnd - offset), max_bytes=16 << 20)
        records = [_kept(m, failover) for m in batch if m.offset < plan.sourceEnd]
        src.append(source.uuid, name, records, origin=source.uuid, producer=None)
        kept += len(records)
        offset = batch[-1].offset + 1
    return kept


def _kept(message: Any, failover: Failover) -> Record:
    where = ((f"{HEADER}topic", message.topic.encode()),
             (f"{HEADER}partition", b"%d" % message.partition),
             (f"{HEADER}offset", b"%d" % message.offset),
             (f"{HEADER}timestamp", b"%d" % message.timestamp_ms),
             (f"{HEADER}failover", b"%d" % failover.pk))
    return Record(value=message.value, key=message.key, headers=(*message.headers, *where),
                  partition=message.partition, timestamp_ms=message.timestamp_ms)


def _kept_upto(src: MessageStore, source: Stream, name: str, plan: PartitionPlan,
               failover: Failover) -> int:
    high = marks_of(src, source.uuid, name).get(plan.partition, (0, 0))[1]
    if not high:
        return 0
    last = dict(src.read(source.uuid, name, plan.partition, high - 1, limit=1)[0].headers)
    if last.get(f"{HEADER}failover") != b"%d" % failover.pk:
        return 0
    return int(last[f"{HEADER}offset"]) + 1


# --- the control plane -------------------------------------------------------------------------


@transaction.atomic
def _reverse(failover: Failover, source: Stream, replica: Stream,
             actor: AbstractBaseUser) -> ReplicaLink:
    """The old source becomes a replica of the promoted stream: its switched topics (and its
    replicas') take the promoted stream as their origin, and a link promoted -> old source."""
    topology_lock()
    closure = downstream_of(source.pk, without=replica.pk)
    reorigin(closure, dict(source.topics.filter(name__in=failover.topics)
                           .values_list("name", "origin_uuid")), replica)
    link = _connect(replica, source, actor, {})
    check_origins([source.pk, replica.pk])
    propagate_topics([replica.pk])
    _reopen(source)
    stream_wake(stream=replica.uuid)
    return (ReplicaLink.objects.select_related("source__cluster", "replica__cluster")
            .get(pk=link.pk))


def _connect(source: Stream, replica: Stream, actor: AbstractBaseUser,
             options: dict[str, Any], upstream: bool = True) -> ReplicaLink:
    link = ReplicaLink.objects.filter(source=source, replica=replica).first()
    if link is None:
        values = {"networkcompression": Compression.OFF,
                  **{k: v for k, v in options.items() if k in LINK_FIELDS}}
        idx = next_idx(source.replica_links.values_list("idx", flat=True),
                       settings.MAX_REPLICAS_PER_STREAM, f"{source.path} has replicas")
        link = ReplicaLink.objects.create(source=source, replica=replica, idx=idx,
                                          created_by=actor, **values)
    if upstream and not Upstream.objects.filter(replica=replica, source=source).exists():
        idx = next_idx(replica.upstreams.values_list("idx", flat=True),
                       settings.MAX_UPSTREAMS_PER_REPLICA, f"{replica.path} has upstreams")
        Upstream.objects.create(replica=replica, source=source, idx=idx, created_by=actor)
    return link


@transaction.atomic
def _restore(failover: Failover, source: Stream, replica: Stream,
             actor: AbstractBaseUser) -> None:
    """After the switch back: the promoted side takes the old source as origin again and the
    links the failover ended come back, with their options."""
    topology_lock()
    closure = downstream_of(replica.pk, without=source.pk)
    reorigin(closure, dict(replica.topics.filter(name__in=failover.topics)
                           .values_list("name", "origin_uuid")), source)
    streams = dict(Stream.objects.filter(path__in={p for r in failover.ended_links
                                                   for p in (r["source"], r["replica"])})
                   .values_list("path", "pk"))
    for record in failover.ended_links:
        if record["source"] in streams and record["replica"] in streams:
            _connect(Stream.objects.get(pk=streams[record["source"]]),
                     Stream.objects.get(pk=streams[record["replica"]]), actor, record,
                     upstream=record["upstream"])
    check_origins([source.pk, replica.pk])
    propagate_topics([source.pk])
    _reopen(replica)
    stream_wake(stream=source.uuid)


def _reopen(stream: Stream) -> None:
    fresh = Stream.objects.select_for_update().get(pk=stream.pk)
    fresh.producers_stopped = ""
    fresh.save(update_fields=["producers_stopped"])  # save, not update: audited
    stream.producers_stopped = ""


def _done(failover: Failover, report: dict[str, Any]) -> None:
    failover.failed_back_at = timezone.now()
    failover.failback = report
    failover.save(update_fields=["failed_back_at", "failback"])  # audited; clears its alarm
    if not report["reverse"]:
        # The switch back was a failover of its own; the failback completes it too.
        for back in Failover.objects.filter(replica=failover.source_id,
                                            source=failover.replica_id, failed_back_at=None):
            back.failed_back_at = failover.failed_back_at
            back.save(update_fields=["failed_back_at"])
