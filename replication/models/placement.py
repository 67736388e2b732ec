"""A cluster's store groups and where each partition lives (issue 33, DESIGN.md invariant 12).

A cluster's messages live in one or more store groups, each a message store (a replicated
PostgreSQL group in production). Every partition is placed on exactly one group; the placement
is kept here, in the control database, and every process that routes caches it with the
cluster's `placement_version`, bumped by every change, so a stale cache is noticed. A partition
with no placement row lives on the cluster's home group (its oldest), which is how clusters
made before store groups, and partitions made by a process that had not yet seen a second
group, are read.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from replication.models.streams import Cluster, Stream


class StoreGroup(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        DRAINING = "draining"  # takes no new partitions; `cluster store drain` empties it

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="store_groups")
    name = models.CharField(max_length=63)
    # Blank: the cluster's store as before store groups (its store_url, else the mode's default).
    url = models.CharField(max_length=1024, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "pk"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="storegroup_name_per_cluster")]

    def __str__(self) -> str:
        return f"{self.name}@{self.cluster.name}"


class Placement(models.Model):
    """Partition `partition` of topic `topic` of `stream` lives in `group` (one row a partition:
    invariant 12)."""

    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="placements")
    topic = models.CharField(max_length=249)
    partition = models.PositiveIntegerField()
    group = models.ForeignKey(StoreGroup, on_delete=models.PROTECT, related_name="placements")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["stream", "topic", "partition"],
                                               name="placement_one_group_per_partition")]

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] on {self.group.name}"


class Rebalance(models.Model):
    """A run of partition moves over a cluster's store groups (`cluster store rebalance`,
    `cluster store drain` of `group`, or one `stream topic partition move`): its plan, made
    when asked, and its progress."""

    class Kind(models.TextChoices):
        REBALANCE = "rebalance"
        DRAIN = "drain"
        MOVE = "move"  # one partition: a plan of one move

    class State(models.TextChoices):
        QUEUED = "QUEUED"
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    ACTIVE = (State.QUEUED, State.RUNNING)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="rebalances")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    group = models.ForeignKey(StoreGroup, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    # [{path, stream, topic, partition, from, to, bytes}], in the order they run; a move
    # done adds its messagesCopied and seconds.
    plan = models.JSONField(default=list, blank=True)
    throttle = models.PositiveBigIntegerField(null=True, blank=True)  # bytes per second
    moves_done = models.PositiveIntegerField(default=0)
    bytes_total = models.PositiveBigIntegerField(default=0)
    bytes_done = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # Its last step or progress: a run active and still for long lost its worker (a Redis
    # restarted empty, a worker killed and its task never redelivered); beat queues it again.
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self) -> str:
        what = f"drain of {self.group.name}" if self.group_id else self.kind
        if self.kind == self.Kind.MOVE and self.plan:
            move = self.plan[0]
            what = f"move of {move['path']}:{move['topic']}[{move['partition']}] to {move['to']}"
        return f"{what}@{self.cluster.name} #{self.pk}"

    @property
    def percent(self) -> int:
        if self.bytes_total:
            done = min(100, self.bytes_done * 100 // self.bytes_total)
        else:
            moves = len(self.plan)
            done = 100 if not moves else self.moves_done * 100 // moves
        # 100 once it succeeded: a run whose moves are all done still deletes their copies.
        return min(done, 99) if self.state in self.ACTIVE else done
