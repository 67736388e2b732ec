"""What Kafka clients leave with the control plane: the producer ids the listeners hand out, and
consumer groups' membership as their coordinators publish it. Both tables were made by the
workers app and keep its names (workers_kafkaproducerid, workers_kafkagroup): only Django's idea
of the models moved here (replication/migrations/0008)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts.models import Tenant


class KafkaProducerId(models.Model):
    """One row per producer id the Kafka listeners hand out (InitProducerId): the table's
    sequence makes ids unique across listeners and restarts, which idempotent producers'
    state in the message stores relies on."""

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                             related_name="+")
    client_id = models.CharField(max_length=255, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workers_kafkaproducerid"

    def __str__(self) -> str:
        return f"producer {self.pk}"


class KafkaGroup(models.Model):
    """A Kafka consumer group's membership as its coordinator (a Kafka listener, another
    process) last published it, for `stream assign list` in the portal. The listener rewrites
    the row on every state change and refreshes it while the group lives; a row past
    `expires` belongs to a group whose listener is gone. The database rather than a cache:
    in the embedded default the listener and the portal are separate processes sharing only
    the database."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    group_id = models.CharField(max_length=255)
    state = models.JSONField(default=dict)  # replication/groups/board.py's snapshot
    expires = models.DateTimeField()

    class Meta:
        db_table = "workers_kafkagroup"
        constraints = [models.UniqueConstraint(fields=["tenant", "group_id"],
                                               name="one_kafka_group_per_tenant")]
        ordering = ["group_id"]

    def __str__(self) -> str:
        return self.group_id


class TxnState(models.TextChoices):
    """Kafka's transaction states (TransactionState.scala), as DescribeTransactions names them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


class KafkaTransaction(models.Model):
    """A transactional id's coordinator state (issue 31), in the control database so that any
    listener takes over a transaction another left (killed mid-way): its producer id and epoch,
    state, the partitions and consumer offsets it holds, its timeout. A Prepare* state is the
    decision, taken before any marker is written; completing it again writes nothing twice
    (the stores' transaction ranges: replication/engine/txnstate.py). The id is the tenant's
    whose user used it first."""

    transactional_id = models.CharField(max_length=255, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    producer_id = models.BigIntegerField()
    epoch = models.IntegerField(default=0)
    state = models.CharField(max_length=16, choices=TxnState.choices, default=TxnState.EMPTY)
    timeout_ms = models.IntegerField(default=60_000)
    started = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)
    # [stream id, topic, partition] each; [stream id, group, topic, partition, offset, metadata]
    partitions = models.JSONField(default=list, blank=True)
    offsets = models.JSONField(default=list, blank=True)
    groups = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["transactional_id"]

    def __str__(self) -> str:
        return self.transactional_id
