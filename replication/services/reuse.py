"""autosetup's `-useexistingreplica true`: the checks that an existing stream can become the
replica of a source, so the copy step and replication go on from what it already holds.

A stream qualifies when each of its topics is empty (no message ever written), or is a copy
of the source's topic of that name: no more partitions, no partition past the source's end,
and its first and last retained messages equal to the source's at the same offsets (a cheap
check of the prefix rule, invariant 2; `diffstreams` checks everything). Empty topics and
copied ones take the source topic's origin, as replication would have given them.
"""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser

from replication.engine.store import Message, OffsetOutOfRange
from replication.engine.storebase import MessageStore
from replication.errors import Conflict, InvalidInput
from replication.models import Stream, Topic
from replication.services.purge import watermarks
from replication.stores import store_for

FIX = ("use an empty stream, or give no -useexistingreplica so that autosetup creates the "
       "replica")


def existing_replica(*, actor: AbstractBaseUser, source: Stream, path: str) -> Stream:
    """The stream at `path`, checked to be usable as a replica of `source`; its topics
    adopt the source's origins. Raises with the reason otherwise (nothing changed)."""
    replica = Stream.objects.restrict(actor).by_path(path, field="replica")
    replica.require(actor, "adminperm", action="use the stream as a replica")
    if replica.pk == source.pk:
        raise InvalidInput(f"{source.path} cannot be a replica of itself", field="replica")
    theirs = {t.name: t for t in source.topics.all()}
    adopted = [_check_topic(source, replica, mine, theirs.get(mine.name))
               for mine in replica.topics.all()]
    for topic in adopted:
        if topic is not None:
            topic.save(update_fields=["origin_uuid"])
    return replica


def _check_topic(source: Stream, replica: Stream, mine: Topic, theirs: Topic | None
                 ) -> Topic | None:
    """The replica's topic with the source's origin when it differs, None when it is right."""
    ends = watermarks(store_for(replica.cluster), replica.uuid, mine.name)
    empty = all(high == 0 for _, high in ends.values())
    where = f"{replica.path}:{mine.name}"
    if theirs is None:
        if empty:
            return None
        raise Conflict(f"{where} holds messages and {source.path} has no topic "
                       f"'{mine.name}': its messages are not the source's; {FIX}",
                       field="replica")
    if mine.partitions > theirs.partitions:
        raise Conflict(f"{where} has {mine.partitions} partitions and the source's topic "
                       f"{theirs.partitions}: a replica cannot have more; {FIX}",
                       field="replica")
    if not empty:
        _check_prefix(source, replica, mine.name, ends)
    if mine.origin_uuid == theirs.origin_uuid:
        return None
    mine.origin_uuid = theirs.origin_uuid
    return mine


def _check_prefix(source: Stream, replica: Stream, topic: str,
                  ends: dict[int, tuple[int, int]]) -> None:
    theirs = store_for(source.cluster)
    source_ends = watermarks(theirs, source.uuid, topic)
    mine = store_for(replica.cluster)
    for partition, (low, high) in sorted(ends.items()):
        if high == 0 or low == high:
            continue
        where = f"{replica.path}:{topic} partition {partition}"
        source_high = source_ends.get(partition, (0, 0))[1]
        if high > source_high:
            raise Conflict(f"{where} ends at offset {high}, past the source's end "
                           f"{source_high}: it holds messages the source does not; {FIX}",
                           field="replica")
        for offset in (low, high - 1):
            if not _same(theirs, source.uuid, mine, replica.uuid, topic, partition, offset):
                raise Conflict(f"{where} differs from the source at offset {offset}: it is "
                               f"not a copy of {source.path}; {FIX}", field="replica")


def _same(theirs: MessageStore, source: UUID, mine: MessageStore, replica: UUID, topic: str,
          partition: int, offset: int) -> bool:
    def one(store: MessageStore, stream: UUID) -> Message | None:
        try:
            found = store.read(stream, topic, partition, offset, limit=1)
        except OffsetOutOfRange:  # expired meanwhile: nothing left to compare with
            return None
        return found[0] if found and found[0].offset == offset else None

    a, b = one(theirs, source), one(mine, replica)
    if a is None:
        return True  # the source no longer holds it (retention): cannot tell, accept
    return b is not None and (a.value, a.key, a.timestamp_ms) == (b.value, b.key,
                                                                   b.timestamp_ms)
