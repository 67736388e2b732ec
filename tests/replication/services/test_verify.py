"""Continuous verification of replica links (issue 16): incremental, recorded on the link, an
alarm at the first differing offset, cleared once repaired; on the real stores."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.utils import timezone

from operations.alarms import alarms_evaluate
from operations.models import Alarm, AlarmKind
from replication.engine.pgbatch import PgBatchStore
from replication.engine.store import Record
from replication.models import ReplicaLink
from replication.services import replica_add, topic_create, upstream_add
from replication.services.compare import marks_of
from replication.services.messages import messages_produce
from replication.services.verify import link_verify, links_verify_due
from replication.stores import store_for
from tests.factories import spread
from workers.replication.applier import batch_serve


@pytest.fixture
def pair(layout, owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    # A message a produce: a batch store replicates whole batches, and the counts below
    # are the offsets a replication up to an offset moves.
    for record in spread(activity, "clicks", [Record(value=b"m%d" % i) for i in range(40)]):
        messages_produce(actor=owner, stream=activity, topic="clicks", records=[record])
    link = ReplicaLink.objects.select_related("replica__cluster").get()
    assert isinstance(store_for(link.replica.cluster), PgBatchStore) == (layout == "batches")
    return activity, activity_ny


def replicate(source, replica, upto: int) -> None:  # type: ignore[no-untyped-def]
    link = ReplicaLink.objects.get()
    ends = marks_of(store_for(replica.cluster), replica.uuid, "clicks")
    for partition in (0, 1):
        start = ends.get(partition, (0, 0))[1]
        batch_serve(link_id=link.pk, topic="clicks", partition=partition, start=start, end=upto)


def the_link() -> ReplicaLink:
    return ReplicaLink.objects.select_related("source__cluster", "replica__cluster").get()


BOTH_LAYOUTS = pytest.mark.parametrize("layout", ["rows", "batches"], indirect=True)


@BOTH_LAYOUTS
def test_verification_covers_the_replicated_prefix_and_goes_on_where_it_stopped(pair):
    source, replica = pair
    replicate(source, replica, 12)
    result = link_verify(link=the_link())
    assert result["firstDifference"] is None and result["messagesChecked"] == 24
    assert the_link().verified_upto == {"clicks:0": 12, "clicks:1": 12}
    assert the_link().last_verified is not None and the_link().verify_error == ""
    replicate(source, replica, 20)
    assert link_verify(link=the_link())["messagesChecked"] == 16  # only what was new


@BOTH_LAYOUTS
def test_a_diverged_replica_raises_an_alarm_at_its_first_differing_offset_until_repaired(
        pair):
    source, replica = pair
    replicate(source, replica, 10)
    store = store_for(replica.cluster)
    store.truncate(replica.uuid, "clicks", 1, 4)  # offset 4 on replaced by other messages
    store.append(replica.uuid, "clicks", [Record(value=b"bad", partition=1)] * 6,
                 origin=source.uuid)
    result = link_verify(link=the_link())
    assert result["firstDifference"] == {"topic": "clicks", "partition": 1, "offset": 4}
    alarms_evaluate()
    alarm = Alarm.objects.open().get(kind=AlarmKind.DIVERGED)
    assert alarm.description.endswith("partition 1 offset 4: repair the replica from its source")
    store.truncate(replica.uuid, "clicks", 1, 4)  # what diffstreams -repair does
    replicate(source, replica, 10)
    assert link_verify(link=the_link())["firstDifference"] is None
    alarms_evaluate()
    assert not Alarm.objects.open().filter(kind=AlarmKind.DIVERGED).exists()


def test_periodic_verification_follows_each_links_interval(pair):
    source, replica = pair
    replicate(source, replica, 5)
    assert links_verify_due() == 1  # never verified
    assert links_verify_due() == 0  # verified a moment ago; hourly by default
    assert links_verify_due(now=timezone.now() + timedelta(seconds=3601)) == 1
    ReplicaLink.objects.update(verify_interval=0)  # turned off
    assert links_verify_due(now=timezone.now() + timedelta(days=1)) == 0


def rest(client, command: str, **params):  # type: ignore[no-untyped-def]
    return client.post(f"/rest/{command}", urlencode(params),
                       content_type="application/x-www-form-urlencoded").json()


def test_verify_on_demand_and_replica_list_show_what_was_verified(api, owner, pair):
    source, replica = pair
    replicate(source, replica, 8)
    body = rest(api(owner), "stream/replica/verify", path=source.path, replica=replica.path,
                interval="600")
    assert body["status"] == "OK" and body["data"][0]["messagesChecked"] == 16
    assert the_link().verify_interval == 600
    [row] = rest(api(owner), "stream/replica/list", path=source.path)["data"]
    assert row["verifiedUpTo"] == {"clicks:0": 8, "clicks:1": 8} and row["lastVerified"] > 0
    assert row["verifyError"] == ""


@pytest.mark.parametrize(("who", "status", "says"), [("bob", 403, "adminperm"),
                                                     ("mallory", 404, "does not exist")])
def test_verify_is_refused_without_adminperm_and_to_an_outsider(api, member, outsider, pair,
                                                                who, status, says):
    source, replica = pair
    user = {"bob": member, "mallory": outsider}[who]
    response = api(user).post("/rest/stream/replica/verify", urlencode(
        {"path": source.path, "replica": replica.path, "interval": "1"}),
        content_type="application/x-www-form-urlencoded")
    assert response.status_code == status and says in response.json()["errors"][0]["desc"]
    assert the_link().verify_interval == 3600 and the_link().last_verified is None
