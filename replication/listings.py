"""Every topic a user sees, kept briefly: a Kafka Metadata for every topic of a cluster of
10,000 topics (issue 33) would otherwise read them all on each request.

A listing is kept per (user, cluster, default stream, permissions) for LISTING_SECONDS, the
same bound as the authorization cache (replication/grants.py): a topic or stream saved or
deleted in this process, and any change that clears the authorization cache, drop every
listing at once; another process's change is seen within LISTING_SECONDS. A listing older
than half that is still answered while one caller reads it afresh (`due`), so a client asking
steadily never waits for the read.

Reading afresh first reads a fingerprint of all a listing depends on (the cluster's topics'
count, highest id and partitions; its streams' paths, tenants and ACEs; the user's roles,
groups and default stream): a few small queries, where the listing itself is two large ones
and an object per stream. When it has not changed, the kept listing is kept on; it is read
whole again at the latest after MAX_SECONDS.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Count, Max, Sum

from accounts.models import Membership
from replication import grants
from replication.models import Stream, Topic
from replication.models.streams import PERMISSIONS
from replication.services.defaultstreams import default_stream_for
from replication.services.names import ResolvedTopic, topic_listing

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

LISTING_SECONDS = grants.GRANT_SECONDS
MAX_SECONDS = 30.0
MAX_LISTINGS = 64
Key = tuple[Any, ...]


@dataclass
class _Kept:
    read_at: float  # when it was last read or found unchanged
    generation: tuple[int, int]
    topics: list[ResolvedTopic]
    fingerprint: tuple[Any, ...]
    listed_at: float  # when it was read whole
    reading: bool = False  # a caller is reading it afresh


_kept: dict[Key, _Kept] = {}
_generation = 0
_lock = threading.Lock()


def key_of(actor: AbstractBaseUser, cluster: str | None, default_stream: str | None,
           perms: tuple[str, ...]) -> Key:
    return (actor.pk, cluster, default_stream, perms)


def generation() -> tuple[int, int]:
    """Moves whenever a topic, ACE or identity changes in this process: what was resolved
    before it moved may be stale."""
    return (_generation, grants.generation())


def kept(key: Key) -> tuple[list[ResolvedTopic] | None, bool]:
    """(the kept listing, None when there is none fresh; whether this caller should read it
    afresh now, `read` with `ahead=True`, while the kept one is answered). No query: safe on an
    event loop."""
    now = time.monotonic()
    with _lock:
        held = _kept.get(key)
        if held is None or held.generation != generation():
            return None, False
        age = now - held.read_at
        if age >= LISTING_SECONDS:
            return None, False
        if age >= LISTING_SECONDS / 2 and not held.reading:
            held.reading = True
            return held.topics, True
        return held.topics, False


def fingerprint(key: Key, actor: AbstractBaseUser) -> tuple[Any, ...]:
    """What changes whenever the listing of `key` may: read before the listing it vouches for,
    so a change between the two shows at the next comparison."""
    _, cluster, default_stream, _perms = key
    topics, streams = Topic.objects.all(), Stream.objects.all()
    if cluster is not None:
        topics = topics.filter(stream__cluster__name=cluster)
        streams = streams.filter(cluster__name=cluster)
    aces = streams.order_by("pk").values_list("pk", "path", "tenant_id", *PERMISSIONS)
    return (
        tuple(topics.aggregate(Count("pk"), Max("pk"), Sum("partitions")).values()),
        hash(tuple(aces)),
        tuple(Membership.objects.filter(user=actor).order_by("tenant_id")
              .values_list("tenant_id", "role")),
        tuple(actor.groups.order_by("name").values_list("name", flat=True)),
        default_stream or default_stream_for(actor=actor, cluster=cluster).path,
    )


def read(key: Key, *, actor: AbstractBaseUser, ahead: bool = False) -> list[ResolvedTopic]:
    """The listing of `key`: the kept one when its fingerprint has not changed, else read
    from the database (topic_listing); kept either way."""
    _, cluster, default_stream, perms = key
    seen, read_at = generation(), time.monotonic()
    try:
        now = fingerprint(key, actor)
        with _lock:
            held = _kept.get(key)
            if held is not None and held.generation == seen and (
                    held.fingerprint == now and read_at - held.listed_at < MAX_SECONDS):
                held.read_at, held.reading = read_at, False
                return held.topics
        topics = topic_listing(actor=actor, cluster=cluster, default_stream=default_stream,
                               perms=perms)
    except BaseException:
        if ahead:
            with _lock:
                if (held := _kept.get(key)) is not None:
                    held.reading = False
        raise
    with _lock:
        # A change that dropped the listings while this was read may not be in it: keep it
        # out, so the next caller reads again.
        if seen == generation():
            if len(_kept) >= MAX_LISTINGS and key not in _kept:
                _kept.clear()
            _kept[key] = _Kept(read_at, seen, topics, now, read_at)
    return topics


def forget(**_signal: Any) -> None:
    """Drop every kept listing (a topic created, changed or deleted here)."""
    global _generation
    with _lock:
        _generation += 1
        _kept.clear()


def connect_receivers() -> None:
    """ReplicationConfig.ready: a topic saved or deleted drops the listings (stream, ACE and
    identity changes do too, through the authorization cache's generation)."""
    from django.db.models.signals import post_delete, post_save

    post_save.connect(forget, sender=Topic, dispatch_uid="listings-save-Topic")
    post_delete.connect(forget, sender=Topic, dispatch_uid="listings-delete-Topic")
