"""The operators' notes on replica links: last progress, last error (a refusal, a timeout, no
live gateway), and the live lag for the browser. What the replicator and gateways write here is
for people to read (`stream replica list`, the stream page, alarms), never a check: the
replica's partitions are the only record of progress.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from replication.events import publish_after_commit
from replication.models import MovingLink, ReplicaLink


def _note(links: QuerySet[ReplicaLink], **values: object) -> None:
    """Write the operators' notes on links (never a check) in one statement that skips the rows
    another transaction holds (a failover ending the link, a job changing its state) rather
    than waiting for them: a replicator or gateway never queues behind another's work
    (DESIGN.md invariant 14). A skipped note is written again at the link's next event."""
    held = links.order_by().select_for_update(skip_locked=True).values("pk")
    with transaction.atomic():  # FOR UPDATE needs one, even as a subquery
        ReplicaLink.objects.filter(pk__in=held).update(**values)


def link_progress(*, link_ids: Iterable[int]) -> None:
    """Batches applied: the links are moving, so their last error no longer stands."""
    _note(ReplicaLink.objects.filter(pk__in=list(link_ids)),
          last_progress=timezone.now(), last_error="", last_error_gateway="")


def link_error(*, link_id: int, error: str, gateway: str = "") -> None:
    _note(ReplicaLink.objects.filter(pk=link_id).exclude(
        last_error=error, last_error_gateway=gateway),
        last_error=error[:2000], last_error_gateway=gateway)


def link_waiting(*, link_ids: Iterable[int], cluster: str) -> None:
    """No live gateway on the destination cluster: say so where `replica list` shows it."""
    error = f"waiting: no live gateway on cluster {cluster}"
    _note(ReplicaLink.objects.filter(pk__in=list(link_ids)).exclude(last_error=error),
          last_error=error, last_error_gateway="")


def link_lag_publish(*, link: MovingLink, messages: int, nbytes: int, lag_ms: int,
                     stalled: bool) -> None:
    """Replica progress for the browser ("replica.lag"), to the tenants of both ends. The
    replicator runs outside any transaction, so this is sent at once."""
    publish_after_commit(tenant_ids=link.tenants, event="replica.lag", payload={
        "link": link.id, "source": link.source_id, "replica": link.replica_id,
        "messagesPending": messages, "bytesPending": nbytes, "timeLagMs": lag_ms,
        "stalled": stalled})
