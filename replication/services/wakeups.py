"""Wake-ups of the source side (replication/transport/wakeups.py), once the transaction that
caused them commits: new data in a stream, consumer cursors committed, and a stream's links
changed (a link, an upstream or a topic saved or deleted: receivers connected in
ReplicationConfig.ready). A change of links or clusters also gives the gateways a new links
epoch (replication/transport/batchqueue.py), so they read their links again.
"""

from __future__ import annotations

from uuid import UUID

import structlog
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from replication.models import Cluster, ReplicaLink, Stream, Topic, Upstream
from replication.transport import transport

log = structlog.get_logger(__name__)


# A wake-up of a source stream whose links changed carries this prefix, so the replicator
# re-reads the stream's links at once rather than trusting its cache (a produce's wake-up only
# says there is new data).
LINKS_CHANGED = "links:"
# A cursor commit's wake-up carries this one: the replicator copies cursors to the replicas on
# it (and on the sweep), not on every produce's wake-up.
CURSORS_CHANGED = "cursors:"


def connect_receivers() -> None:
    """ReplicationConfig.ready: signals rather than a call in each service, because every
    path that adds, pauses, resumes, edits or removes a link or an upstream saves or deletes
    one of these rows."""
    for model in (ReplicaLink, Upstream):
        post_save.connect(link_changed, sender=model, dispatch_uid=f"links_changed_{model}")
        post_delete.connect(link_changed, sender=model, dispatch_uid=f"links_gone_{model}")
    post_save.connect(topic_changed, sender=Topic, dispatch_uid="topic_changed")
    post_save.connect(cluster_changed, sender=Cluster, dispatch_uid="cluster_changed")


def link_changed(sender: type, instance: ReplicaLink | Upstream, **kwargs: object) -> None:
    _links_changed(instance.source_id)


def topic_changed(sender: type, instance: Topic, created: bool, **kwargs: object) -> None:
    if created:
        _links_changed(instance.stream_id)  # the stream's links carry one more topic


def cluster_changed(sender: type, instance: Cluster, **kwargs: object) -> None:
    transaction.on_commit(_gateways_reread)  # a store URL the gateways may have read


def _gateways_reread() -> None:
    try:
        transport().batches.links_changed()
    except Exception as error:  # Redis down: it gets a new epoch when it comes back
        log.warning("links_changed_failed", error=str(error))


def _links_changed(stream_id: int) -> None:
    def wake() -> None:
        _gateways_reread()
        found = Stream.objects.filter(pk=stream_id).values_list("uuid", flat=True).first()
        if found is not None:  # else deleted: the replicator's watch drops its links
            _wake([f"{LINKS_CHANGED}{found}"])

    transaction.on_commit(wake)


def stream_wake(*, stream: UUID) -> None:
    """New data in `stream`: wake the source side once the producing transaction commits."""
    transaction.on_commit(lambda: _wake([str(stream)]))


def cursors_wake(*, stream: UUID) -> None:
    """Consumer cursors committed in `stream`: its replicas get them now."""
    transaction.on_commit(lambda: _wake([f"{CURSORS_CHANGED}{stream}"]))


def _wake(streams: list[str]) -> None:
    try:
        transport().wakeups.wake(streams)
    except Exception as error:  # the sweep catches up; a produce must not fail
        log.warning("wake_failed", streams=streams, error=str(error))
