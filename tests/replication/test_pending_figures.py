"""A link's backlog figures (`pending_figures`, read by the lag recorder every 5 s and the
alarms every 10 s): an idle link is told from every partition's ends in a few queries per
store, not read topic by topic (issue 33: 500 replicated streams of 100 partitions kept a
Celery worker a third busy per 100 links); a link with a backlog gets the same figures as
before."""

from __future__ import annotations

import inspect
import time

import pytest

from operations import alarms
from operations.alarms import alarms_evaluate
from replication import figures, placement
from replication.engine.store import Record
from replication.figures import PendingFigures, pending_figures
from replication.models import ReplicaLink
from replication.services import topic_create
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.factories import replicated_clicks, spread
from tests.replication.services.test_storegroups import grow
from workers.replication.applier import batch_serve


@pytest.fixture(autouse=True)
def _fresh_views():
    placement.forget()
    yield
    placement.forget()


def links_read(monkeypatch, module, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The ids of the links `module.name` is called for (its `link` argument), in order; the
    function itself still runs."""
    seen: list[int] = []
    real = getattr(module, name)
    parameters = list(inspect.signature(real).parameters)

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(args[parameters.index("link")].pk)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return seen


@pytest.fixture
def full_reads(monkeypatch):
    """The links whose backlog was read in full (the per-topic path), in order."""
    return links_read(monkeypatch, figures, "_pending")


@pytest.fixture
def link(owner, activity, activity_ny):  # type: ignore[no-untyped-def]
    """activity -> activity_ny, 3 messages a partition of `clicks` replicated, and two
    topics never written to."""
    for cluster in (activity.cluster, activity_ny.cluster):
        store_for(cluster)
    made = replicated_clicks(owner, activity, activity_ny, per_partition=3)
    for name in ("views", "carts"):
        topic_create(actor=owner, stream=activity, name=name, partitions=4)
    return made


def test_an_idle_link_is_not_read_topic_by_topic(link, full_reads):
    assert pending_figures([link]) == {link.pk: PendingFigures()}
    assert full_reads == []


def test_links_read_with_their_sources_clusters_cost_one_query(link, django_assert_num_queries):
    # The recorder and the alarms read their links with select_related("source__cluster"):
    # their sources are not read a second time (issue 33's idle cost).
    loaded = ReplicaLink.objects.select_related("source__cluster", "replica__cluster").get(
        pk=link.pk)
    with django_assert_num_queries(1):  # the sources' topics
        found = pending_figures([loaded])
    assert found == pending_figures([ReplicaLink.objects.get(pk=link.pk)])


def test_sources_holding_nothing_cost_no_query(owner, activity, agreed,
                                               django_assert_num_queries):
    topic_create(actor=owner, stream=activity, name="empty", partitions=4)
    loaded = ReplicaLink.objects.select_related("source__cluster", "replica__cluster").get(
        pk=agreed.pk)
    assert pending_figures([loaded]) == {agreed.pk: PendingFigures()}  # the stores opened
    with django_assert_num_queries(0):  # no topics read: nothing is held to be pending
        assert pending_figures([loaded]) == {agreed.pk: PendingFigures()}


def test_a_new_message_makes_the_link_read_in_full(owner, activity, link, full_reads):
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=spread(activity, "clicks", [Record(b"a"), Record(b"b")]))
    found = pending_figures([link])[link.pk]
    assert (found.messages, full_reads) == (2, [link.pk])
    assert found.min_ts > 0 and found.bytes > 0


def test_a_partly_applied_partition_counts_what_is_left(owner, activity, link, full_reads):
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=spread(activity, "clicks", [Record(b"%d" % i) for i in range(4)]))
    # Partition 0's new batch (offsets 3 and 4, as produced) applied, partition 1's not.
    batch_serve(link_id=link.pk, topic="clicks", partition=0, start=3, end=5)
    assert pending_figures([link])[link.pk].messages == 2
    assert full_reads == [link.pk]


def test_a_replica_behind_on_its_last_partition_is_not_idle(owner, activity, link):
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=spread(activity, "clicks", [Record(b"x")], start=1))
    assert pending_figures([link])[link.pk].messages == 1


def test_the_alarms_read_every_idle_link_at_once(link, full_reads):
    alarms_evaluate()
    assert full_reads == []


def test_ends_come_from_the_group_holding_each_partition(operator, owner, activity):
    grow(operator, activity.cluster, "s2", "s3")
    topic_create(actor=owner, stream=activity, name="clicks", partitions=6)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=spread(activity, "clicks", [Record(b"%d" % i) for i in range(9)]))
    router = store_for(activity.cluster)
    view = placement.view_of(activity.cluster.name)
    assert len({view.group_of(activity.uuid, "clicks", p) for p in range(6)}) == 3
    ends = router.ends_of([activity.uuid])
    assert ends == {(activity.uuid, "clicks", p): marks
                    for p, marks in router.watermarks(activity.uuid, "clicks").items()}
    assert sorted(high for _, high in ends.values()) == [1, 1, 1, 2, 2, 2]


def test_retention_reads_only_the_links_with_something_pending(owner, activity, link,
                                                                monkeypatch):
    read = links_read(monkeypatch, alarms, "_link_loss")
    assert alarms.retention_check(stream=activity, before_ms=int(time.time() * 1000)) == 0
    assert read == []
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=spread(activity, "clicks", [Record(b"old", timestamp_ms=1_000)]))
    assert alarms.retention_check(stream=activity, before_ms=int(time.time() * 1000)) == 1
    assert read == [link.pk]
