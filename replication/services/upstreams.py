from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication.errors import AlreadyExists, InvalidInput, NotFound, upstreams_of
from replication.events import publish_link_event
from replication.models import Stream, Upstream
from replication.services.common import check_origins, next_idx, propagate_topics, topology_lock
from replication.services.wakeups import stream_wake


@transaction.atomic
def upstream_add(*, actor: AbstractBaseUser, replica: Stream, source: Stream) -> Upstream:
    """The replica owner's half of the two-way agreement (DESIGN.md invariant 5)."""
    replica.require(actor, "adminperm", action="add an upstream")
    if source.pk == replica.pk:
        raise InvalidInput(f"{replica.path} cannot be an upstream of itself", field="upstream")
    topology_lock()
    Stream.objects.select_for_update().get(pk=replica.pk)
    if replica.upstreams.filter(source=source).exists():
        raise AlreadyExists(f"{source.path} is already an upstream of {replica.path}",
                            field="upstream")
    limit = settings.MAX_UPSTREAMS_PER_REPLICA
    idx = next_idx(replica.upstreams.values_list("idx", flat=True), limit,
                   f"{replica.path} has {limit} upstreams")
    check_origins([replica.id], extra_edges=[(source.id, replica.id)])
    upstream = Upstream.objects.create(replica=replica, source=source, idx=idx, created_by=actor)
    propagate_topics([source.id])
    publish_link_event("upstream.added", source, replica)
    stream_wake(stream=source.uuid)  # the agreement is complete: data moves now if not paused
    return upstream


@transaction.atomic
def upstream_remove(*, actor: AbstractBaseUser, replica: Stream, source: Stream) -> None:
    replica.require(actor, "adminperm", action="remove an upstream")
    deleted, _ = replica.upstreams.filter(source=source).delete()
    publish_link_event("upstream.removed", source, replica)
    if not deleted:
        raise NotFound(f"{source.path} is not an upstream of {replica.path}",
                       field="upstream", hint=upstreams_of(replica.path))
