"""Failover: a replica takes over from its source when the source's cluster is lost or must be
left (issue 16).

The replica stops accepting data from the source (the link and the upstream, both sides'
records, are ended), becomes the origin of the topics it carried (producers write to it, at
each partition's end: offsets go on from where replication left them, DESIGN.md invariant 1),
and keeps its consumers' replicated cursors as they are. The old source accepts no producers
from then on, so no message is acknowledged on both sides; a failback reopens it.

A planned failover (the source reachable) stops the source's producers first, drains the link
to zero pending (this process applies what is left, as a gateway would), then switches: nothing
is lost or reordered. `force=True` switches at once, with the source reachable or not, and
records per partition what the replica knows of the source's end. Either way a Failover row
records what may be missing (the unreplicated tail, in messages and time); the audit trail and
an alarm come from that row (operations/).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

import structlog
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from replication.engine.replicator import pending, plan_batches, sync_cursors
from replication.engine.store import Misordered, UnknownTopic
from replication.errors import Conflict, Hint, InvalidInput, upstreams_of
from replication.events import publish_link_event
from replication.lag_history import lag_latest
from replication.models import (
    Failover,
    ReplicaLink,
    ReplicaState,
    Stream,
    Topic,
    Upstream,
    carried_topics,
)
from replication.services.apply import batch_apply
from replication.services.common import check_origins, topology_lock
from replication.services.transactions import txn_abort_promoted
from replication.services.wakeups import stream_wake
from replication.stores import store_for

log = structlog.get_logger(__name__)
T = TypeVar("T")
LINK_FIELDS = ("paused", "throttle", "synchronous", "networkcompression", "networkencryption")


@dataclass
class Tail:
    """What the replica lacks of the source at the switch, as far as it is known."""

    reachable: bool
    partitions: list[dict[str, Any]] = field(default_factory=list)
    messages: int | None = None
    age_ms: int | None = None
    known_from: str = ""


def replica_failover(
    *, replica: Stream, source: Stream | None = None, force: bool = False,
    actor: AbstractBaseUser,
) -> Failover:
    """Make `replica` take over from `source` (its only source when None)."""
    replica.require(actor, "adminperm", action="fail over")
    link = failover_link(replica, source, force=force)
    if force:
        return forced_failover(link=link, actor=actor)
    return planned_failover(link=link, actor=actor)


def forced_failover(*, link: ReplicaLink, actor: AbstractBaseUser) -> Failover:
    """Switch at once, the source's store up or not, whatever its producers do: their stop is
    a commit that waits for nobody (producers take no lock on the stream's row), the appends
    in flight are waited for only while the store answers, and the tail is measured or, from a
    store that does not answer within FAILOVER_PROBE_SECONDS, sampled."""
    stopped_here = _stop_producers(link, forced=True)
    try:
        return _switch(link, tail=_forced_tail(link), forced=True, actor=actor)
    except BaseException:
        if stopped_here:
            _restart_producers(link.source)
        raise


def planned_failover(*, link: ReplicaLink, actor: AbstractBaseUser,
                     topics: list[str] | None = None) -> Failover:
    """Stop the source's producers, drain the link, switch. `topics` limits the topics that
    change origin (a failback's switch back: only those the failover took, not the promoted
    stream's own topics of a multi-master pair)."""
    link.source.require(actor, "adminperm", action="stop its producers for a planned failover")
    _require_reachable(link)
    _stop_producers(link)
    try:
        _await_appends(link)
        tail = _drain(link)
        return _switch(link, tail=tail, forced=False, actor=actor, topics=topics)
    except BaseException:
        _restart_producers(link.source)  # a failover that did not happen changes nothing
        raise


# --- which link ------------------------------------------------------------------------------


def failover_link(replica: Stream, source: Stream | None, *, force: bool) -> ReplicaLink:
    """The agreed, moving link a failover ends; a clear error for any other."""
    links = (ReplicaLink.objects.with_agreement().filter(replica=replica)
             .select_related("source__cluster", "replica__cluster"))
    if source is not None:
        link = links.filter(source=source).first()
        if link is None:
            raise InvalidInput(f"{replica.path} is not a replica of {source.path}",
                               field="source", hint=upstreams_of(replica.path))
    else:
        link = _only_link(replica, list(links))
    _check_link(link, force=force)
    return link


def _only_link(replica: Stream, links: list[ReplicaLink]) -> ReplicaLink:
    if len(links) > 1:
        paths = ", ".join(sorted(link.source.path for link in links))
        raise InvalidInput(f"{replica.path} replicates from several sources ({paths}): name "
                           "the one to take over from with -source", field="source")
    if links:
        return links[0]
    declared = Upstream.objects.filter(replica=replica).select_related("source").first()
    if declared is not None:
        raise Conflict(f"{replica.path} accepts {declared.source.path} as its upstream, but "
                       f"{declared.source.path} never registered it as a replica, so it holds "
                       "none of its data: there is nothing to fail over", field="path")
    raise InvalidInput(f"{replica.path} is no replica: no stream replicates to it, so there is "
                       "nothing to fail over from; fail over the replica, not its source",
                       field="path")


def _check_link(link: ReplicaLink, *, force: bool) -> None:
    source, replica = link.source.path, link.replica.path
    if not link.agreed:
        raise Conflict(f"the replication {source} -> {replica} was never agreed: {replica} has "
                       f"not accepted {source} as its upstream, so it holds none of its data; "
                       "there is nothing to fail over", field="path")
    if link.paused:
        raise Conflict(f"the replication {source} -> {replica} is paused, so {replica} may lag "
                       "far behind", field="path", hint=Hint(
                           "replica.resume", "resume it and let it catch up before failing over",
                           {"path": source, "replica": replica},
                           cli="resume it ({command}) and let it catch up before failing over"))
    if link.state == ReplicaState.COPY_IN_PROGRESS and not force:
        raise Conflict(f"a copy into {replica} is in progress: wait for it to finish, or fail "
                       "over with -force true and accept what it holds so far", field="path")


# --- the source's side -------------------------------------------------------------------------


def _within(seconds: float, call: Any) -> Any:
    """call(), or TimeoutError after `seconds`: a lost store may hang rather than refuse."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(call).result(timeout=seconds)
    except FutureTimeout as error:
        raise TimeoutError(f"no answer within {seconds:g}s") from error
    finally:
        pool.shutdown(wait=False)


def _probe(link: ReplicaLink) -> str | None:
    """None when the source's store answers; else why not."""
    source = link.source
    first = source.topics.values_list("name", flat=True).first()
    try:
        _within(settings.FAILOVER_PROBE_SECONDS,
                lambda: store_for(source.cluster).watermarks(source.uuid, first or "-"))
    except UnknownTopic:
        return None  # it answered
    except Exception as error:  # any failure to answer is what is asked about
        return f"{type(error).__name__}: {error}"
    return None


def _require_reachable(link: ReplicaLink) -> None:
    why = _probe(link)
    if why is not None:
        raise Conflict(
            f"the store of {link.source.path} (cluster {link.source.cluster.name}) does not "
            f"answer ({why}): a planned failover stops its producers and drains it first; if "
            "that cluster is lost, fail over with -force true", field="path")


def _stop_producers(link: ReplicaLink, *, forced: bool = False) -> bool:
    """Refuse the source's producers from now on (one short transaction: produces read the
    flag without locking it, inside their store transactions). False when a forced failover
    finds them stopped already (a failover that died midway); a planned one refuses then."""
    kind = "forced" if forced else "planned"
    with transaction.atomic():
        source = Stream.objects.select_for_update().get(pk=link.source_id)
        if source.producers_stopped and forced:
            return False
        if source.producers_stopped:
            raise Conflict(f"{source.path} accepts no producers already "
                           f"({source.producers_stopped}): another failover is under way",
                           field="path")
        source.producers_stopped = (f"a {kind} failover to {link.replica.path} is under way: "
                                    f"produce to {link.replica.path} once it completes")
        source.save(update_fields=["producers_stopped"])
    link.source.producers_stopped = source.producers_stopped
    return True


def _await_appends(link: ReplicaLink) -> None:
    """Once producers are stopped, wait for the appends that were admitted before: after
    this, no acknowledged message can still appear on the source (invariant 10)."""
    source, seconds = link.source, settings.FAILOVER_PROBE_SECONDS
    try:
        _within(seconds + 1, lambda: store_for(source.cluster).fence_appends(
            source.uuid, timeout=seconds))
    except Exception as error:  # StoreError, TimeoutError: the store stopped answering
        raise Conflict(f"the produces in flight on {source.path} did not finish ({error}): "
                       "nothing was switched; retry, or fail over with -force true",
                       field="path") from error


def _restart_producers(source: Stream) -> None:
    with transaction.atomic():
        stream = Stream.objects.select_for_update().filter(pk=source.pk).first()
        if stream is not None and stream.producers_stopped:
            stream.producers_stopped = ""
            stream.save(update_fields=["producers_stopped"])
    source.producers_stopped = ""


def carried_of(link: ReplicaLink) -> dict[str, UUID]:
    return carried_topics(link.replica.uuid, dict(
        link.source.topics.values_list("name", "origin_uuid")))


def _drain(link: ReplicaLink) -> Tail:
    """Apply what the replica still lacks, until none is pending, then copy the cursors."""
    topics = link_drain(link, why=f"{link.source.path}'s producers write again")
    return _measured_tail(link, topics)


def link_drain(link: ReplicaLink, *, why: str) -> dict[str, UUID]:
    """Apply here, as a gateway would, what the link's replica lacks until nothing is pending,
    then copy the committed cursors; returns the topics the link carries. A link handed to
    the Spark catch-up job (large backlogs) is waited for, not raced."""
    source, replica = link.source, link.replica
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    topics = carried_of(link)
    deadline = time.monotonic() + settings.FAILOVER_DRAIN_SECONDS
    while specs := plan_batches(src, source.uuid, dst, replica.uuid, topics,
                                max_messages=settings.REPLICATION_BATCH_MESSAGES,
                                max_bytes=settings.REPLICATION_BATCH_BYTES):
        if time.monotonic() > deadline:
            raise Conflict(f"{replica.path} did not catch up with {source.path} within "
                           f"{settings.FAILOVER_DRAIN_SECONDS:g}s: nothing was switched and "
                           f"{why}; retry, or raise STREAMGATE_FAILOVER_DRAIN_SECONDS",
                           field="path")
        if not ReplicaLink.objects.moving().filter(pk=link.pk).exists():
            time.sleep(0.2)  # a Spark copy has the link: it moves the bulk
            continue
        for spec in specs:
            try:
                batch_apply(link_id=link.pk, topic=spec.topic, partition=spec.partition,
                            start=spec.start, end=spec.end)
            except Misordered:
                break  # a gateway moved the partition meanwhile: plan again
    sync_cursors(src, source.uuid, dst, replica.uuid, topics, {})
    return topics


# --- what may be missing -----------------------------------------------------------------------


def _measured_tail(link: ReplicaLink, topics: dict[str, UUID]) -> Tail:
    """The tail from both stores: exact, per partition."""
    source, replica = link.source, link.replica
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    backlog = pending(src, source.uuid, dst, replica.uuid, topics)
    ends = _replica_ends(link, topics)
    rows = []
    for name in sorted(topics):
        try:
            marks = src.watermarks(source.uuid, name)
        except UnknownTopic:
            marks = {}
        for partition, (_low, high) in sorted(marks.items()):
            end = ends.get((name, partition), 0)
            rows.append(_row(name, partition, end, high, high))
    age = (max(0, int(time.time() * 1000) - backlog.min_ts)
           if backlog.messages and backlog.min_ts else 0)
    return Tail(True, rows, backlog.messages, age, "measured on the source's store at the switch")


def _replica_ends(link: ReplicaLink, topics: dict[str, UUID]) -> dict[tuple[str, int], int]:
    replica = link.replica
    dst = store_for(replica.cluster)
    counts = dict(replica.topics.filter(name__in=list(topics)).values_list("name", "partitions"))
    ends = {}
    for name, count in counts.items():
        try:
            marks = dst.watermarks(replica.uuid, name)
        except UnknownTopic:
            marks = {}
        ends.update({(name, p): marks.get(p, (0, 0))[1] for p in range(count)})
    return ends


def _row(topic: str, partition: int, replica_end: int, source_end: int | None,
         known_end: int) -> dict[str, Any]:
    # sourceKnownEnd: the source's end as far as the replica knows it (it had at least that).
    return {"topic": topic, "partition": partition, "replicaEnd": replica_end,
            "sourceEnd": source_end, "sourceKnownEnd": known_end}


def _forced_tail(link: ReplicaLink) -> Tail:
    topics = carried_of(link)
    if _probe(link) is None:
        try:
            _await_appends(link)
            return _measured_tail(link, topics)
        except Exception:  # lost between the probe and the reading: as if unreachable
            pass
    return _sampled_tail(link, topics)


def _sampled_tail(link: ReplicaLink, topics: dict[str, UUID]) -> Tail:
    """The source is unreachable: per partition the replica's end (the source had at least
    that much), and the tail from the last lag sample (replication/lag_history.py)."""
    ends = _replica_ends(link, topics)
    rows = [_row(name, p, end, None, end) for (name, p), end in sorted(ends.items())]
    sample = lag_latest([link.pk]).get(link.pk)
    if sample is None:
        return Tail(False, rows)
    t_ms, messages, _bytes, lag_ms, _stalled = sample
    before = max(0.0, time.time() - t_ms / 1000)
    age = lag_ms + int(before * 1000) if messages else 0
    return Tail(False, rows, messages, age,
                f"the last lag sample, {before:.0f}s before the switch; what the source "
                "received after it is unknown")


# --- the switch --------------------------------------------------------------------------------


def _switch(link: ReplicaLink, *, tail: Tail, forced: bool, actor: AbstractBaseUser,
            topics: list[str] | None = None) -> Failover:
    """End the links into the side taking over in their replicas' stores first, then switch in
    one control-plane transaction; a switch that does not happen reopens them."""
    fenced = _into_takeover(link)
    try:
        _end_in_stores(fenced)
        failover = _switch_now(link, fenced, tail=tail, forced=forced, actor=actor,
                               topics=topics)
    except BaseException:
        for each in fenced:
            try:
                store_for(each.replica.cluster).reopen_link(str(each.pk))
            except Exception as error:  # its store away: the failover's retry ends or reopens it
                log.warning("reopen_link_failed", link=each.pk, error=str(error))
        raise
    txn_abort_promoted(stream=link.replica, topics=failover.topics)
    return failover


def _into_takeover(link: ReplicaLink) -> list[ReplicaLink]:
    """The failover's link and the old source's other links into streams it feeds: once their
    topics originate on this side, a batch of theirs applied late would land after the new
    origin's own messages (trimmed by offset as if it were the same), so each is ended in its
    replica's store before the switch."""
    closure = downstream_of(link.replica_id, without=link.source_id)
    return [link, *ReplicaLink.objects.filter(source=link.source_id, replica_id__in=closure)
            .exclude(pk=link.pk).select_related("replica__cluster")]


def _end_in_stores(links: list[ReplicaLink]) -> None:
    seconds = settings.FAILOVER_PROBE_SECONDS
    for each in links:
        replica = each.replica
        try:
            _within(seconds + 1, lambda r=replica, e=each: store_for(r.cluster).end_link(
                r.uuid, str(e.pk), timeout=seconds))
        except Exception as error:  # StoreError, TimeoutError: the replica's store is away
            raise Conflict(f"the store of {replica.path} did not answer ({error}): nothing was "
                           "switched; retry once it is back", field="path") from error


@transaction.atomic
def _switch_now(link: ReplicaLink, fenced: list[ReplicaLink], *, tail: Tail, forced: bool,
                actor: AbstractBaseUser, topics: list[str] | None) -> Failover:
    topology_lock()
    source, replica = link.source, link.replica
    if not ReplicaLink.objects.filter(pk=link.pk).exists():
        raise Conflict(f"{replica.path} no longer replicates from {source.path}: another "
                       "failover or a removal came first", field="path")
    if {each.pk for each in _into_takeover(link)} != {each.pk for each in fenced}:
        raise Conflict(f"the links of {source.path} changed during the failover: nothing was "
                       "switched; retry", field="path")
    carried = {name: origin for name, origin in carried_of(link).items()
               if topics is None or name in topics}
    ended = [_end(link)]
    closure = downstream_of(replica.pk, without=source.pk)
    reorigin(closure, carried, replica)
    # Links between the old source and the side that now originates its topics would feed two
    # origins of one topic into a stream (invariant 4): they end too, and a failback restores.
    ended += [_end(other) for other in ReplicaLink.objects.filter(
        Q(source=source, replica_id__in=closure) | Q(source_id__in=closure, replica=source)
    ).select_related("source", "replica")]
    check_origins([replica.pk, source.pk])
    _fence(source, replica)
    failover = Failover.objects.create(
        replica=replica, source=source, source_path=source.path, forced=forced,
        source_reachable=tail.reachable, actor=actor, partitions=tail.partitions,
        missing_messages=tail.messages, missing_ms=tail.age_ms, missing_from=tail.known_from,
        topics=sorted(carried), ended_links=ended,
    )
    publish_link_event("replica.failover", source, replica)
    stream_wake(stream=replica.uuid)  # its own replicas now carry what it originates
    return failover


def _end(link: ReplicaLink) -> dict[str, Any]:
    """Delete a link and its upstream (both sides' records); what a failback needs back."""
    upstreams = list(Upstream.objects.filter(replica=link.replica_id, source=link.source_id))
    record = {"source": link.source.path, "replica": link.replica.path,
              "upstream": bool(upstreams), **{name: getattr(link, name) for name in LINK_FIELDS}}
    for upstream in upstreams:
        upstream.delete()  # one by one, so the audit trail records each
    link.delete()
    return record


def downstream_of(start: int, *, without: int) -> set[int]:
    """`start` and the streams it feeds, directly or along chains, not through `without`."""
    seen, frontier = {start}, {start}
    while frontier:
        found = set(ReplicaLink.objects.filter(source_id__in=frontier)
                    .exclude(replica_id=without).values_list("replica_id", flat=True))
        frontier = found - seen
        seen |= frontier
    return seen


def reorigin(closure: set[int], carried: dict[str, UUID], replica: Stream) -> None:
    for topic in Topic.objects.filter(stream_id__in=closure, name__in=list(carried)):
        if topic.origin_uuid == carried[topic.name]:
            topic.origin_uuid = replica.uuid
            topic.save(update_fields=["origin_uuid"])  # save, not update: audited


def _fence(source: Stream, replica: Stream) -> None:
    stream = Stream.objects.select_for_update().get(pk=source.pk)
    stream.producers_stopped = (
        f"it failed over to {replica.path} at {timezone.now():%Y-%m-%d %H:%M:%S} UTC: produce "
        f"to {replica.path}; a failback brings the two together again")
    stream.save(update_fields=["producers_stopped"])
    source.producers_stopped = stream.producers_stopped
