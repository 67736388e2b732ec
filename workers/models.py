"""Records of the worker processes themselves. The bulk Job record lives with the domain that
starts and finishes jobs (replication/models.py); its table is still workers_job."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class KafkaProducerId(models.Model):
    """One row per producer id the Kafka listeners hand out (InitProducerId): the table's
    sequence makes ids unique across listeners and restarts, which idempotent producers'
    state in the message stores relies on."""

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                             related_name="+")
    client_id = models.CharField(max_length=255, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"producer {self.pk}"
