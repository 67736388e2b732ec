"""Consumer groups of a stream, as the portal shows them: each group's committed offset and
lag per partition (from the store's cursors and watermarks), beside the cursors the replicas
hold (the replicator copies committed cursors along every link, so a group that fails over
to a replica resumes there), and resetting a group's offsets (Kafka's
`kafka-consumer-groups --reset-offsets`: to earliest, latest, a timestamp or an offset).

Live members of a Kafka group come from a listener's coordinator: replication/groups/members.py
reads what it publishes and the portal shows them beside these offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from accounts.models import Tenant, TokenScope
from replication import ace
from replication.engine.storebase import MessageStore
from replication.errors import Conflict, InvalidInput, NoSuchPartition
from replication.models import Cluster, KafkaGroup, ReplicaLink, Stream, Topic
from replication.scopes import scope_mask, scope_require
from replication.services.browse import offset_for_time
from replication.services.cursors import check_group
from replication.services.messages import _on_store
from replication.services.topics import topic_of
from replication.services.wakeups import cursors_wake
from replication.signals import group_offsets_reset_done
from replication.stores import store_for

# MapR's rule for `stream cursor list`: any of these; a reset moves cursors, so consumeperm.
LIST_PERMS = ("consumeperm", "adminperm", "produceperm", "topicperm")
RESET_TO = ("earliest", "latest", "timestamp", "offset")

@dataclass
class PartitionOffsets:
    topic: str
    partition: int
    committed: int
    low: int
    high: int
    replicas: dict[str, int | None] = field(default_factory=dict)  # replica path -> cursor

    @property
    def lag(self) -> int:
        return max(0, self.high - max(self.committed, self.low))


@dataclass
class GroupOffsets:
    group: str
    partitions: list[PartitionOffsets]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def failover(self, replica: str) -> tuple[bool, int]:
        """Whether every committed cursor reached `replica`, and by how many messages the
        replica's cursors are behind in all."""
        behind = 0
        for p in self.partitions:
            there = p.replicas.get(replica)
            behind += p.committed - there if there is not None else p.committed
        return behind <= 0, max(0, behind)


def _readable_replicas(actor: AbstractBaseUser, stream: Stream) -> list[Stream]:
    links = (ReplicaLink.objects.restrict(actor).filter(source=stream)
             .select_related("replica__cluster").order_by("idx"))
    # One identity per tenant of the replicas, not two queries per replica (64 of them).
    identities: dict[int, Any] = {}
    perms = scope_mask(actor, frozenset(LIST_PERMS))
    readable = []
    for link in links:
        replica = link.replica
        if replica.tenant_id not in identities:
            identities[replica.tenant_id] = replica.identity_of(actor)
        if any(ace.allows(getattr(replica, p), identities[replica.tenant_id]) for p in perms):
            readable.append(replica)
    return readable


def group_offsets(*, actor: AbstractBaseUser, stream: Stream) -> tuple[list[GroupOffsets],
                                                                       list[str]]:
    """Every group with a committed cursor on the stream, with lag per partition, and the
    paths of the replicas (those the actor may read) whose cursors are shown beside."""
    stream.require(actor, *LIST_PERMS, action="list consumer groups")
    replicas = _readable_replicas(actor, stream)
    own = _cursors(stream)
    # Only replicas holding cursors are read, found in one query per cluster: a stream with
    # 64 replicas cost 64 store reads a page, most of them empty.
    holding = set().union(*(store_for(c).cursor_streams() for c in
                            {r.cluster.pk: r.cluster for r in replicas}.values())) if own else set()
    copies = {r.path: {(g, t, p): o for g, t, p, o in store_for(r.cluster).cursors(r.uuid)}
              if r.uuid in holding else {} for r in replicas}
    groups: dict[str, list[PartitionOffsets]] = {}
    for g, row in own:
        row.replicas = {path: found.get((g, row.topic, row.partition))
                        for path, found in copies.items()}
        groups.setdefault(g, []).append(row)
    return [GroupOffsets(g, rows) for g, rows in groups.items()], [r.path for r in replicas]


def _cursors(stream: Stream) -> list[tuple[str, PartitionOffsets]]:
    """Every committed cursor of the stream with its partition's watermarks, by group."""
    store = store_for(stream.cluster)
    marks = {t.name: _on_store(t, lambda t=t: store.watermarks(stream.uuid, t.name))
             for t in stream.topics.all()}
    return [(g, PartitionOffsets(t, p, committed, *marks.get(t, {}).get(p, (0, 0))))
            for g, t, p, committed in sorted(store.cursors(stream.uuid))]


@dataclass(frozen=True)
class GroupInStream:
    stream: Stream
    partitions: int  # with a committed cursor
    lag: int


@dataclass
class TenantGroup:
    """A consumer group across the tenant's streams: where it has committed, how far behind
    it is there, and its live state when it is a Kafka group with members now."""

    group: str
    streams: list[GroupInStream] = field(default_factory=list)
    state: str = "Empty"  # Kafka's state of a group with no member
    members: int = 0

    @property
    def total_lag(self) -> int:
        return sum(s.lag for s in self.streams)


def tenant_groups(*, actor: AbstractBaseUser, tenant: Tenant) -> list[TenantGroup]:
    """Every group of the tenant the actor sees: those with committed cursors in the tenant's
    streams the actor may list cursors of, and its live Kafka groups; the most behind first.
    One store read per stream and topic: a tenant-wide view, not a per-request one."""
    groups: dict[str, TenantGroup] = {}
    # Only the columns the check and the page need, the clusters once each (issue 34: the
    # tenant's 1,000 whole streams with their clusters were most of the page's time).
    streams = list(Stream.objects.restrict(actor).filter(tenant=tenant)
                   .only("path", "uuid", "cluster_id", "tenant_id", *LIST_PERMS)
                   .order_by("path"))
    # One identity for the tenant (two queries), not one per stream.
    who = streams[0].identity_of(actor) if streams else None
    perms = scope_mask(actor, frozenset(LIST_PERMS))
    allowed: dict[str, bool] = {}  # an ACE's answer, once per distinct ACE (most are alike)

    def may(value: str) -> bool:
        if value not in allowed:
            allowed[value] = ace.allows(value, who)
        return allowed[value]

    visible = [s for s in streams if any(may(getattr(s, p)) for p in perms)]
    # One query per cluster finds the streams with cursors; only those are read (a tenant of
    # 1,000 streams took 21 s reading every stream's cursors and watermarks).
    clusters = Cluster.objects.in_bulk({s.cluster_id for s in visible})
    committed = set().union(*(store_for(c).cursor_streams() for c in clusters.values()))
    for stream in (s for s in visible if s.uuid in committed):
        stream.cluster = clusters[stream.cluster_id]
        per_group: dict[str, list[PartitionOffsets]] = {}
        for g, row in _cursors(stream):
            per_group.setdefault(g, []).append(row)
        for g, rows in per_group.items():
            groups.setdefault(g, TenantGroup(g)).streams.append(
                GroupInStream(stream, len(rows), sum(r.lag for r in rows)))
    readable = {str(s.uuid) for s in visible}
    for row in KafkaGroup.objects.filter(tenant=tenant, expires__gt=timezone.now()):
        members = row.state.get("members", [])
        reads = {p["stream"] for m in members for p in m.get("partitions", [])}
        if reads and not reads & readable:
            continue  # a live group of streams this actor may not list
        group = groups.setdefault(row.group_id, TenantGroup(row.group_id))
        group.state, group.members = row.state.get("state", "Empty"), len(members)
    return sorted(groups.values(), key=lambda g: (-g.total_lag, g.group))


def _targets(store: MessageStore, stream: Stream, topic: Topic, to: str,
             marks: dict[int, tuple[int, int]], at_ms: int | None,
             offset: int | None) -> dict[int, int]:
    if to == "earliest":
        return {p: low for p, (low, _high) in marks.items()}
    if to == "latest":
        return {p: high for p, (_low, high) in marks.items()}
    if to == "timestamp":
        if at_ms is None:
            raise InvalidInput("give the time to reset to", field="timestamp")
        return {p: offset_for_time(store, stream, topic, p, low, high, at_ms)
                for p, (low, high) in marks.items()}
    if offset is None:
        raise InvalidInput("give the offset to reset to", field="offset")
    bad = [f"partition {p} holds {low} to {high}" for p, (low, high) in sorted(marks.items())
           if not low <= offset <= high]
    if bad:
        raise InvalidInput(f"offset {offset} is outside what the topic holds: "
                           f"{'; '.join(bad)}", field="offset")
    return dict.fromkeys(marks, offset)


@dataclass(frozen=True)
class ResetRow:
    """One partition of a reset, as its preview shows it: the committed offset now (None:
    nothing committed), the one after, the partition's end and the lag after."""

    partition: int
    current: int | None
    new: int
    high: int

    @property
    def lag(self) -> int:
        return max(0, self.high - self.new)


def _require_inactive(stream: Stream, group: str) -> None:
    """Refuse while the group has live members, as kafka-consumer-groups does: a running
    consumer commits its own position over the reset at its next commit."""
    row = (KafkaGroup.objects.filter(tenant_id=stream.tenant_id, group_id=group,
                                     expires__gt=timezone.now()).first())
    members = row.state.get("members", []) if row is not None else []
    if members:
        raise Conflict(
            f"group {group} has {len(members)} live member{'s' if len(members) > 1 else ''} "
            f"(state {row.state.get('state', 'Stable')}): offsets can only be reset while the "
            f"group is inactive; stop its consumers and reset again", field="group")


def _partitions(topic: Topic, wanted: list[int] | None,
                marks: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    if not wanted:
        return marks
    missing = sorted(set(wanted) - set(marks))
    if missing:
        raise NoSuchPartition(f"topic {topic} has partitions 0 to {topic.partitions - 1}, "
                              f"not {', '.join(map(str, missing))}", field="partitions")
    return {p: marks[p] for p in sorted(set(wanted))}


def _plan(
    *, actor: AbstractBaseUser, stream: Stream, group: str, topic: str, to: str,
    timestamp_ms: int | None, offset: int | None, partitions: list[int] | None,
) -> tuple[Topic, list[ResetRow]]:
    """What a reset would do, every rule of it checked, changing nothing."""
    scope_require(actor, TokenScope.PRODUCE, stream=True,
                  action=f"reset consumer group offsets on {stream.path}")
    stream.require(actor, "consumeperm", action="reset consumer group offsets")
    check_group(group)
    if to not in RESET_TO:
        raise InvalidInput(f"reset to one of {', '.join(RESET_TO)}, not {to!r}", field="to")
    target = topic_of(stream, topic)
    _require_inactive(stream, group)
    store = store_for(stream.cluster)
    marks = _partitions(target, partitions, _on_store(
        target, lambda: store.watermarks(stream.uuid, target.name)))
    new = _targets(store, stream, target, to, marks, timestamp_ms, offset)
    return target, [ResetRow(p, store.fetch_cursor(stream.uuid, group, target.name, p), moved,
                             marks[p][1]) for p, moved in sorted(new.items())]


def group_offsets_reset(
    *, actor: AbstractBaseUser, stream: Stream, group: str, topic: str, to: str,
    timestamp_ms: int | None = None, offset: int | None = None,
    partitions: list[int] | None = None, dry_run: bool = False,
) -> list[ResetRow]:
    """Move the group's cursors on the partitions of `topic` (all unless `partitions` names
    some; consumeperm; refused while the group has live members); each partition's offset
    before and after. `dry_run` (kafka-consumer-groups' --dry-run) checks every rule and
    answers the same rows, changing nothing. Replicas keep their cursors until the group
    commits past them there: a replica's cursor never moves back (merge_cursors)."""
    target, rows = _plan(actor=actor, stream=stream, group=group, topic=topic, to=to,
                         timestamp_ms=timestamp_ms, offset=offset, partitions=partitions)
    if dry_run:
        return rows
    store = store_for(stream.cluster)
    for row in rows:
        store.commit_cursor(stream.uuid, group, target.name, row.partition, row.new)
    cursors_wake(stream=stream.uuid)  # the replicator copies the cursors to the replicas now
    group_offsets_reset_done.send(
        sender=Stream, stream=stream, actor=actor,
        details={"group": group, "topic": target.name, "to": to, "timestamp_ms": timestamp_ms,
                 "before": {str(r.partition): r.current for r in rows},
                 "after": {str(r.partition): r.new for r in rows}})
    return rows
