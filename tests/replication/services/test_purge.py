"""Kafka's DeleteRecords in the domain (`records_delete`): `stream purge` cut at the caller's
offsets, with the purge's rules: adminperm, an agreed replica's backlog kept, audited."""

from __future__ import annotations

import pytest

from operations.models import AuditEvent
from replication import services
from replication.errors import InvalidInput, NoSuchPartition, PermissionDenied
from replication.services.purge import records_delete
from tests.portal import test_rest
from tests.portal.test_rest_maintenance import deliver, marks, produce

world = test_rest.world  # the fixture: alice's activity replicating (paused) to newyork


def test_records_below_each_offset_go_and_the_low_watermarks_are_answered(world):
    alice, sf, ny = world.users["alice"], world.activity, world.ny
    produce(alice, sf, "clicks", [f"m{i}" for i in range(5)], partition=0)
    produce(alice, sf, "clicks", ["x", "y"], partition=1)
    deliver(sf, ny, 0, 5)
    deliver(sf, ny, 1, 2)
    assert records_delete(actor=alice, stream=sf, topic="clicks", offsets={0: 3, 1: -1}) == {
        0: 3, 1: 2}
    assert marks(sf) == {0: (3, 5), 1: (2, 2)}
    assert marks(ny) == {0: (0, 5), 1: (0, 2)}  # the replica's copy is its own
    event = AuditEvent.objects.get(action="purge")
    assert event.after == {"topic": "clicks", "offsets": {"0": 3, "1": 2}, "messagesPurged": 5}


def test_what_a_replica_has_not_received_is_kept_and_the_answer_says_so(world):
    alice, sf, ny = world.users["alice"], world.activity, world.ny
    produce(alice, sf, "clicks", [f"m{i}" for i in range(5)], partition=0)
    deliver(sf, ny, 0, 2)  # the (paused) replica holds offsets 0-1 only
    assert records_delete(actor=alice, stream=sf, topic="clicks", offsets={0: 4}) == {0: 2}
    assert marks(sf)[0] == (2, 5)


def test_an_offset_past_the_end_or_a_missing_partition_is_refused_alone(world):
    alice, spare = world.users["alice"], world.spare
    services.topic_create(actor=alice, stream=spare, name="logs", partitions=2)
    produce(alice, spare, "logs", ["a", "b"], partition=0)
    found = records_delete(actor=alice, stream=spare, topic="logs",
                           offsets={0: 1, 1: 5, 7: 0})
    assert found[0] == 1
    assert isinstance(found[1], InvalidInput) and found[1].field == "offset"
    assert "delete below 0 to 0" in str(found[1])
    assert isinstance(found[7], NoSuchPartition)
    assert marks(spare, "logs") == {0: (1, 2), 1: (0, 0)}


def test_deleting_records_needs_adminperm(world):
    bob, sf = world.users["bob"], world.activity
    produce(world.users["alice"], sf, "clicks", ["a"], partition=0)
    with pytest.raises(PermissionDenied, match="bob may not delete records"):
        records_delete(actor=bob, stream=sf, topic="clicks", offsets={0: 1})
    assert marks(sf)[0] == (0, 1)
