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

from django.db import models

from replication.models.streams import Cluster, Stream


class StoreGroup(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        DRAINING = "draining"  # takes no new partitions (moves, a later slice, empty it)

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
