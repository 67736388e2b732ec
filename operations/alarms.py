"""Alarms in MapR's spirit: the engine raises them while a condition holds and clears them when
it no longer does; people only read them.

`alarms_evaluate` (every ~10 s, operations/tasks.py) derives the conditions from the models and
the stores and reconciles the open alarms with them, idempotently: one open alarm per (kind,
object), raising what is new, clearing what went away. Retention losses are events rather than
states: `retention_check` raises them from `stream_expire`, and they clear once no loss was seen
for ALARM_RETENTION_HOLD_SECONDS.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.signals import post_save
from django.utils import timezone

from operations.models import Alarm, AlarmKind
from replication.engine.replicator import PartitionPending, pending
from replication.engine.store import OffsetOutOfRange
from replication.engine.storebase import MessageStore
from replication.events import publish_after_commit
from replication.figures import PendingFigures, pending_figures
from replication.lag_history import lag_latest
from replication.models import (
    Cluster,
    Failover,
    Gateway,
    ReplicaLink,
    Stream,
    SyncMode,
    carried_topics,
    link_is_stalled,
)
from replication.stores import store_for

log = structlog.get_logger(__name__)

# The kinds `alarms_evaluate` owns: an open one whose condition is gone is cleared.
EVALUATED = frozenset(AlarmKind) - {AlarmKind.RETENTION_UNREPLICATED, AlarmKind.FAILOVER}
# The replicator's own words when a destination cluster has no live gateway
# (replication/services/linknotes.py link_waiting): reported as the cluster's alarm instead.
WAITING_PREFIX = "waiting: no live gateway"
SAMPLE_FRESH_SECONDS = 15.0  # a lag sample this recent stands for the link's backlog
COUNT_LIMIT = 10_000  # messages read to count a retention loss; beyond it, "at least"


@dataclass(frozen=True)
class Condition:
    kind: str
    key: str
    entity: str
    description: str
    link_id: int | None = None
    cluster_id: int | None = None
    tenant_ids: frozenset[int] = field(default_factory=frozenset)
    stream_id: int | None = None


def alarms_evaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Raise the alarms whose condition holds and clear those whose condition went away."""
    now = now or timezone.now()
    found, unknown = _conditions()
    raised = sum(alarm_raise(condition=c, now=now) for c in found.values())
    cleared = 0
    for alarm in Alarm.objects.open().filter(kind__in=EVALUATED):
        # An object whose figures could not be read keeps its alarms as they are.
        if (alarm.kind, alarm.key) not in found and alarm.key not in unknown:
            cleared += alarm_clear(alarm=alarm, now=now)
    hold = now - timedelta(seconds=settings.ALARM_RETENTION_HOLD_SECONDS)
    for alarm in Alarm.objects.open().filter(kind=AlarmKind.RETENTION_UNREPLICATED,
                                             last_seen__lt=hold):
        cleared += alarm_clear(alarm=alarm, now=now)
    return {"raised": raised, "cleared": cleared, "open": Alarm.objects.open().count()}


def _conditions() -> tuple[dict[tuple[str, str], Condition], set[str]]:
    links = list(ReplicaLink.objects.with_agreement()
                 .select_related("source__cluster", "replica__cluster"))
    found: dict[tuple[str, str], Condition] = {}
    unknown: set[str] = set()
    for condition in [*_link_conditions(links, unknown), *_cluster_conditions(links),
                      *_copies_conditions(unknown)]:
        found[(condition.kind, condition.key)] = condition
    return found, unknown


def _is_moving(link: ReplicaLink) -> bool:
    return link.agreed and not link.paused


def link_condition(link: ReplicaLink, kind: str, description: str) -> Condition:
    return Condition(kind, f"link:{link.pk}", f"{link.source.path} -> {link.replica.path}",
                     description, link_id=link.pk,
                     tenant_ids=frozenset({link.source.tenant_id, link.replica.tenant_id}))


def _link_conditions(links: list[ReplicaLink], unknown: set[str]) -> Iterator[Condition]:
    figures = _all_figures([link for link in links if _is_moving(link)])
    for link in links:
        if not link.agreed:
            yield link_condition(link, AlarmKind.WAITING_FOR_UPSTREAM, (
                f"{link.replica.path} has not accepted {link.source.path} as its upstream, so "
                "nothing replicates: its owner approves it as an upstream"))
            continue
        if link.paused:
            continue
        if link.last_error and not link.last_error.startswith(WAITING_PREFIX):
            by = f" (gateway {link.last_error_gateway})" if link.last_error_gateway else ""
            yield link_condition(link, AlarmKind.REPLICATION_ERROR, f"{link.last_error}{by}")
        if link.verify_error:
            yield link_condition(link, AlarmKind.DIVERGED, link.verify_error)
        if link.synchronous and link.mode == SyncMode.ASYNC:
            since = f" since {link.mode_since:%Y-%m-%d %H:%M:%S} UTC" if link.mode_since else ""
            yield link_condition(link, AlarmKind.ASYNC_FALLBACK, (
                f"synchronous replica {link.replica.path} replicates asynchronously{since}: "
                f"{link.mode_reason or 'no reason recorded'}"))
        yield from _stall_condition(link, unknown, figures.get(link.pk))


def _all_figures(links: list[ReplicaLink]) -> dict[int, PendingFigures]:
    """Every moving link's backlog: the lag recorder's last sample where it is at most
    SAMPLE_FRESH_SECONDS old (the recorder reads every link every 5 s; reading them all again
    here every 10 s was a fifth of an idle deployment's cost, issue 33), the others in one
    pass (a few queries per store, not a few per link). Without that pass when a store is
    down: each of those links is then read on its own, so one store down does not hide the
    other links' alarms."""
    oldest = time.time() * 1000 - SAMPLE_FRESH_SECONDS * 1000
    figures = {pk: PendingFigures(bytes=sample[2], messages=sample[1])
               for pk, sample in lag_latest([link.pk for link in links]).items()
               if sample[0] >= oldest}
    unsampled = [link for link in links if link.pk not in figures]
    try:
        figures.update(pending_figures(unsampled))
    except Exception as error:
        log.warning("alarm_figures_unavailable", error=str(error))
    return figures


def _stall_condition(link: ReplicaLink, unknown: set[str],
                     figures: PendingFigures | None) -> Iterator[Condition]:
    try:
        if figures is None:
            figures = pending_figures([link])[link.pk]
    except Exception as error:  # a store that is down must not stop the other alarms
        log.warning("alarm_figures_unavailable", link=link.pk, error=str(error))
        unknown.add(f"link:{link.pk}")
        return
    if link_is_stalled(link, figures.messages):
        yield link_condition(link, AlarmKind.STALLED, (
            f"{figures.messages} messages pending and none applied for over "
            f"{settings.REPLICATION_STALL_SECONDS:g}s"))


def _cluster_conditions(links: list[ReplicaLink]) -> Iterator[Condition]:
    """Destination clusters of moving links with no live gateway: replication to them stops."""
    clusters = {link.replica.cluster.pk: link.replica.cluster for link in links
                if _is_moving(link)}
    live = set(Gateway.objects.live().filter(cluster__in=clusters)
               .values_list("cluster_id", flat=True))
    configured: dict[int, int] = {}
    for cluster_id in Gateway.objects.filter(cluster__in=clusters).values_list("cluster_id",
                                                                               flat=True):
        configured[cluster_id] = configured.get(cluster_id, 0) + 1
    for cluster in clusters.values():
        if cluster.pk in live:
            continue
        count = configured.get(cluster.pk, 0)
        state = (f"all {count} configured gateways are down" if count else
                 "no gateway is configured: an operator adds them")
        yield Condition(AlarmKind.GATEWAYS_DOWN, f"cluster:{cluster.pk}", cluster.name,
                        f"no live gateway on cluster {cluster.name}, so nothing replicates to "
                        f"its replicas: {state}", cluster_id=cluster.pk,
                        tenant_ids=_cluster_tenants(cluster.pk))


def _copies_conditions(unknown: set[str]) -> Iterator[Condition]:
    """Clusters whose store's group acknowledges commits on fewer servers than the cluster
    requires (a standby lost, or not yet caught up): an acks=all produce then waits, or, with
    Patroni's non-strict synchronous mode, is acknowledged on fewer copies (invariant 11)."""
    for cluster in Cluster.objects.filter(required_copies__gt=1):
        key = f"cluster:{cluster.pk}:copies"
        try:
            group = store_for(cluster).group()
        except Exception as error:  # a store that is down must not stop the other alarms
            log.warning("alarm_store_group_unavailable", cluster=cluster.name, error=str(error))
            unknown.add(key)
            continue
        if group.copies < cluster.required_copies:
            roles = ", ".join(f"{m.name} {m.role} {m.state}" for m in group.members)
            yield Condition(AlarmKind.COPIES_SHORT, key, cluster.name, (
                f"cluster {cluster.name} requires {cluster.required_copies} copies of every "
                f"acknowledged message but its store's commits are on {group.copies} now "
                f"({roles}): start the lost standby (it rejoins by itself)"),
                cluster_id=cluster.pk, tenant_ids=_cluster_tenants(cluster.pk))


def _cluster_tenants(cluster_id: int) -> frozenset[int]:
    return frozenset(Stream.objects.filter(cluster_id=cluster_id)
                     .values_list("tenant_id", flat=True).distinct())


# --- raising and clearing -----------------------------------------------------------------------


def alarm_raise(*, condition: Condition, now: datetime | None = None) -> bool:
    """Open the alarm unless it is open already (then refresh it). True when newly raised."""
    now = now or timezone.now()
    opened = Alarm.objects.open().filter(kind=condition.kind, key=condition.key)
    if opened.update(last_seen=now, description=condition.description):
        return False
    try:
        with transaction.atomic():
            alarm = Alarm.objects.create(
                kind=condition.kind, key=condition.key, entity=condition.entity[:2100],
                link_id=condition.link_id, cluster_id=condition.cluster_id,
                stream_id=condition.stream_id, description=condition.description, raised=now,
                last_seen=now,
            )
    except IntegrityError:
        return False  # another evaluator raised it a moment ago
    log.info("alarm_raised", alarm=alarm.kind, entity=alarm.entity, id=alarm.pk)
    _publish("alarm.raised", alarm, condition.tenant_ids)
    return True


def alarm_clear(*, alarm: Alarm, now: datetime | None = None) -> int:
    now = now or timezone.now()
    if not Alarm.objects.filter(pk=alarm.pk, cleared__isnull=True).update(cleared=now):
        return 0
    log.info("alarm_cleared", alarm=alarm.kind, entity=alarm.entity, id=alarm.pk)
    _publish("alarm.cleared", alarm, _tenants_of(alarm))
    return 1


def _tenants_of(alarm: Alarm) -> frozenset[int]:
    if alarm.cluster_id is not None:
        return _cluster_tenants(alarm.cluster_id)
    if alarm.stream_id is not None:
        return frozenset(Stream.objects.filter(pk=alarm.stream_id)
                         .values_list("tenant_id", flat=True))
    ends = Stream.objects.filter(source_links__pk=alarm.link_id) | Stream.objects.filter(
        replica_links__pk=alarm.link_id)
    return frozenset(ends.values_list("tenant_id", flat=True))


def _publish(event: str, alarm: Alarm, tenant_ids: Iterable[int]) -> None:
    payload = {"id": alarm.pk, "kind": alarm.kind, "entity": alarm.entity,
               "description": alarm.description}
    publish_after_commit(tenant_ids=tenant_ids, event=event, payload=payload)


# --- retention ----------------------------------------------------------------------------------


def retention_check(*, stream: Stream, before_ms: int) -> int:
    """Before retention deletes the messages of `stream` older than `before_ms`: raise an alarm
    on each agreed replica link (paused ones too: their replica waits for those messages) whose
    replica has not received some of them. Returns how many such messages were found.

    Checked just before the delete, not in the same transaction: a batch applied in between
    makes the count an over-estimate, never an under-estimate."""
    try:
        links = list(ReplicaLink.objects.agreed().filter(source=stream)
                     .select_related("source", "replica__cluster"))
        # A link with nothing pending loses nothing: read topic by topic only the others.
        pending_now = pending_figures(links)
        return sum(_link_loss(link, stream, before_ms) for link in links
                   if pending_now[link.pk].messages)
    except Exception as error:  # retention must run even when the check cannot
        log.warning("retention_check_failed", stream=stream.path, error=str(error))
        return 0


def on_stream_expiring(sender: object, *, stream: Stream, before_ms: int, **_: object) -> None:
    """The receiver of replication.signals.stream_expiring (connected in apps.py)."""
    retention_check(stream=stream, before_ms=before_ms)


def _link_loss(link: ReplicaLink, stream: Stream, before_ms: int) -> int:
    topics = carried_topics(link.replica.uuid, dict(
        stream.topics.values_list("name", "origin_uuid")))
    source = store_for(stream.cluster)
    backlog = pending(source, stream.uuid, store_for(link.replica.cluster), link.replica.uuid,
                      topics)
    losses = [(part, _older(source, stream.uuid, part, before_ms))
              for part in backlog.partitions
              if part.first_ts is not None and part.first_ts < before_ms]
    losses = [(part, count) for part, count in losses if count]
    if not losses:
        return 0
    total = sum(count for _, count in losses)
    where = ", ".join(f"{p.topic} partition {p.partition} offsets {p.start}-{p.start + n - 1}"
                      for p, n in losses[:5])
    more = f" and {len(losses) - 5} more partitions" if len(losses) > 5 else ""
    alarm_raise(condition=link_condition(link, AlarmKind.RETENTION_UNREPLICATED, (
        f"retention (ttl {stream.ttl}s) deleted {total} messages of {stream.path} that "
        f"{link.replica.path} had not received: {where}{more}")))
    log.warning("retention_unreplicated", stream=stream.path, replica=link.replica.path,
                messages=total)
    return total


def _older(store: MessageStore, stream: UUID, part: PartitionPending, before_ms: int) -> int:
    """Unreplicated messages at the head of the partition that the cut deletes (expire deletes
    a prefix of each partition: the messages before the first one at or after the cut)."""
    try:
        messages = store.read(stream, part.topic, part.partition, part.start,
                              limit=min(COUNT_LIMIT, part.messages), max_bytes=64 << 20)
    except OffsetOutOfRange:
        return 0
    count = 0
    for message in messages:
        if message.timestamp_ms >= before_ms:
            break
        count += 1
    return count


# --- failovers ----------------------------------------------------------------------------------


def connect_receivers() -> None:
    """The alarm of a failover, raised in the failover's own transaction: the replication
    layer records the Failover, this layer (above it) raises what operators read."""
    post_save.connect(_failed_over, sender=Failover, dispatch_uid="operations.alarms.failover")


def _failed_over(sender: type, instance: Failover, created: bool, raw: bool = False,
                 **kwargs: object) -> None:
    if raw:
        return
    if created:
        alarm_raise(condition=failover_condition(instance))
    elif instance.failed_back_at is not None:  # a failback brought the two together again
        for alarm in Alarm.objects.open().filter(kind=AlarmKind.FAILOVER,
                                                 key=f"failover:{instance.pk}"):
            alarm_clear(alarm=alarm)


def failover_condition(failover: Failover) -> Condition:
    replica = failover.replica
    tenants = {replica.tenant_id}
    if failover.source is not None:
        tenants.add(failover.source.tenant_id)
    return Condition(AlarmKind.FAILOVER, f"failover:{failover.pk}",
                     f"{failover.source_path} -> {replica.path}", failover_text(failover),
                     stream_id=replica.pk, tenant_ids=frozenset(tenants))


def failover_text(failover: Failover) -> str:
    how = "forced failover (source unreachable)" if not failover.source_reachable else (
        "forced failover" if failover.forced else "planned failover")
    head = (f"{how}: {failover.replica.path} took over from {failover.source_path} at "
            f"{failover.at:%Y-%m-%d %H:%M:%S} UTC and is now the origin of "
            f"{len(failover.topics)} topics; ")
    return head + missing_text(failover)


def missing_text(failover: Failover) -> str:
    """What may be missing on the replica: the source's unreplicated tail."""
    if failover.missing_messages is None:
        return ("what may be missing is unknown (the source was unreachable and no lag sample "
                "was recorded): compare with the source when it returns (failback)")
    if failover.missing_messages == 0:
        return f"nothing is missing ({failover.missing_from})"
    age = f", the oldest {failover.missing_ms / 1000:.1f}s old" if failover.missing_ms else ""
    gaps = [p for p in failover.partitions
            if p.get("sourceEnd") is not None and p["sourceEnd"] > p["replicaEnd"]]
    where = ", ".join(f"{p['topic']} partition {p['partition']} offsets {p['replicaEnd']}-"
                      f"{p['sourceEnd'] - 1}" for p in gaps[:5])
    more = f" and {len(gaps) - 5} more partitions" if len(gaps) > 5 else ""
    return (f"{failover.missing_messages} messages produced on {failover.source_path} had not "
            f"reached the replica{age} ({failover.missing_from})"
            + (f": {where}{more}" if where else "")
            + "; they stay on the source and a failback keeps them")
