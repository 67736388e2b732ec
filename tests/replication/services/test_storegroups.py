"""A cluster over three store groups (issue 33, first slice): placement spreads new
partitions, every routed path reads and writes the group holding the partition (checked in
each group's database itself), a stale placement cache never writes to the wrong group, and
`cluster store remove` refuses what would lose a partition."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from django.core.cache import cache

from replication import placement
from replication.engine import fence
from replication.engine.store import Record
from replication.errors import Conflict, PermissionDenied, StreamgateError
from replication.models import Placement
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce, topic_watermarks
from replication.services.storegroups import (
    groups_of,
    store_group_add,
    store_group_remove,
    store_group_rows,
)
from replication.storerouter import GroupRouter
from replication.stores import default_store_url, store_for, store_url
from tests.factories import spread


def group_url(cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    # Named <test db>_store_<...>: the session's teardown drops it with the clusters' stores;
    # a database a test, so no test sees another's partitions.
    return default_store_url(f"{cluster.name}_{name}_{uuid.uuid4().hex[:8]}")


@pytest.fixture(autouse=True)
def _fresh_views():
    placement.forget()
    yield
    placement.forget()


def grow(operator, cluster, *names: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The cluster on a fresh store (the session's default one holds other tests' bytes, which
    placement weighs), then the groups added; every group's database URL by name."""
    cluster.store_url = group_url(cluster, "s1")
    cluster.save(update_fields=["store_url"])
    store_for(cluster)
    for name in names:
        store_group_add(actor=operator, cluster=cluster.name, name=name,
                        url=group_url(cluster, name))
    return {g.name: g.url or store_url(cluster) for g in cluster.store_groups.all()}


def held(url: str, stream) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    """(topic, partition) -> next offset of what the group's database holds, read there."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT topic, partition, next_offset FROM partitions "
                            "WHERE stream = %s AND held", (stream.uuid,)).fetchall()
        strays = conn.execute("SELECT count(*) FROM partitions WHERE stream = %s AND NOT held "
                              "AND next_offset > 0", (stream.uuid,)).fetchone()[0]
    assert strays == 0, "a group wrote to a partition it does not hold"
    return {(t, p): n for t, p, n in rows}


@pytest.fixture
def three(operator, activity):  # type: ignore[no-untyped-def]
    return grow(operator, activity.cluster, "s2", "s3")


def test_a_cluster_starts_with_one_group_and_no_router(operator, activity):
    store = store_for(activity.cluster)
    assert not isinstance(store, GroupRouter)
    rows = store_group_rows(activity.cluster)
    assert [r["name"] for r in rows] == ["s1"] and rows[0]["health"] == "ok"


def test_new_partitions_spread_over_the_groups(owner, activity, three):
    assert isinstance(store_for(activity.cluster), GroupRouter)
    # Placed when the store first hears of the topic (its first read or write), outside the
    # creation's transaction and its topology lock (invariant 14).
    assert topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks",
                                         partitions=6)) == {p: (0, 0) for p in range(6)}
    by_group = {name: sorted(p for (t, p) in held(url, activity)) for name, url in three.items()}
    assert sorted(len(ps) for ps in by_group.values()) == [2, 2, 2]
    assert sorted(p for ps in by_group.values() for p in ps) == list(range(6))
    placed = {(p.partition, p.group.name) for p in Placement.objects.filter(stream=activity)}
    assert placed == {(p, name) for name, ps in by_group.items() for p in ps}


def test_rest_produce_and_read_go_to_the_partitions_group(owner, activity, three):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    placed = messages_produce(actor=owner, stream=activity, topic="clicks", records=spread(
        activity, "clicks", [Record(value=b"v%d" % i) for i in range(30)]))
    assert sorted({p for p, _ in placed}) == [0, 1, 2]
    ends = {}
    for url in three.values():
        ends.update(held(url, activity))
    assert ends == {("clicks", p): 10 for p in range(3)}
    for p in range(3):
        got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=p,
                               offset=0, limit=100)
        assert [m.value for m in got] == [b"v%d" % i for i in range(p, 30, 3)]
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {
        p: (0, 10) for p in range(3)}


def test_keyed_produce_is_split_by_group_and_answers_in_order(owner, activity, three):
    topic_create(actor=owner, stream=activity, name="keyed", partitions=3)
    records = [Record(value=b"%d" % i, key=b"k%d" % (i % 5)) for i in range(50)]
    placed = messages_produce(actor=owner, stream=activity, topic="keyed", records=records)
    store = store_for(activity.cluster)
    for record, (partition, offset) in zip(records, placed, strict=True):
        got = store.read(activity.uuid, "keyed", partition, offset, limit=1)
        assert got[0].value == record.value and got[0].key == record.key


def test_a_stale_placement_cache_never_writes_to_the_wrong_group(owner, activity, three):
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=3))
    router = store_for(activity.cluster)
    view = placement.view_of(activity.cluster.name)
    right = view.group_of(activity.uuid, "clicks", 0)
    wrong = next(name for name in three if name != right)
    # Another process's cache: partition 0 on the wrong group (as after a drop and re-create).
    view.where[(activity.uuid, "clicks")][0] = wrong
    with pytest.raises(Exception, match=fence.NOT_HELD):
        view.stores[wrong].append(activity.uuid, "clicks", [Record(b"x", partition=0)],
                                  origin=activity.uuid)
    placed = router.append(activity.uuid, "clicks", [Record(b"x", partition=0)],
                           origin=activity.uuid)
    assert placed == [(0, 0)]
    assert held(three[right], activity)[("clicks", 0)] == 1
    assert ("clicks", 0) not in held(three[wrong], activity)
    assert placement.view_of(activity.cluster.name).group_of(activity.uuid, "clicks", 0) == right


def test_remove_refuses_a_group_holding_partitions_and_the_last_group(operator, owner, activity,
                                                                        three):
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=3))
    with pytest.raises(Conflict, match="still holds 1 partition"):
        store_group_remove(actor=operator, cluster=activity.cluster.name, name="s3")
    assert activity.cluster.store_groups.count() == 3
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s4",
                    url=group_url(activity.cluster, "s4"))
    store_group_remove(actor=operator, cluster=activity.cluster.name, name="s4")
    assert sorted(activity.cluster.store_groups.values_list("name", flat=True)) == [
        "s1", "s2", "s3"]


def test_a_cluster_back_to_one_group_writes_new_partitions_again(operator, owner, activity):
    """Adding a group fences every store; removing it again takes the fence off, so the one
    store left (with no router to mark new partitions held) takes every write as before."""
    groups = grow(operator, activity.cluster, "s2")
    home = store_for(activity.cluster)
    assert isinstance(home, GroupRouter)
    store_group_remove(actor=operator, cluster=activity.cluster.name, name="s2")
    store = store_for(activity.cluster)
    assert not isinstance(store, GroupRouter)
    topic_create(actor=owner, stream=activity, name="fresh", partitions=2)
    messages_produce(actor=owner, stream=activity, topic="fresh", records=spread(
        activity, "fresh", [Record(value=b"v%d" % i) for i in range(10)]))
    assert topic_watermarks(activity.topics.get(name="fresh")) == {0: (0, 5), 1: (0, 5)}
    with psycopg.connect(groups["s1"]) as conn:
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'sg_not_held'"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM partitions WHERE NOT held").fetchone()[0] == 0


def test_remove_refuses_the_last_group(operator, activity):
    store_for(activity.cluster)
    with pytest.raises(Conflict, match="the last of cluster"):
        store_group_remove(actor=operator, cluster=activity.cluster.name, name="s1")


@pytest.mark.parametrize(("name", "url", "error"), [
    ("S2", "postgresql://postgres@127.0.0.1:5432/x", "invalid store group name 'S2'"),
    ("s1", "postgresql://postgres@127.0.0.1:5432/x", "already has a store group s1"),
    ("s2", "mysql://h/x", "is not a message store URL"),
    ("s2", "postgresql://postgres@127.0.0.1:1/x", "cannot reach or create"),
])
def test_add_refuses_bad_names_and_urls_and_changes_nothing(operator, activity, name, url,
                                                            error):
    store_for(activity.cluster)
    before = activity.cluster.placement_version
    with pytest.raises(StreamgateError, match=error) as caught:
        store_group_add(actor=operator, cluster=activity.cluster.name, name=name, url=url)
    assert "fix" in str(caught.value) or "use" in str(caught.value) or "give" in str(
        caught.value) or "already" in str(caught.value)
    assert [g.name for g in groups_of(activity.cluster)] == ["s1"]
    activity.cluster.refresh_from_db()
    assert activity.cluster.placement_version == before


def test_add_is_for_operators_only(owner, activity):
    with pytest.raises(PermissionDenied):
        store_group_add(actor=owner, cluster=activity.cluster.name, name="s2",
                        url=group_url(activity.cluster, "s2"))


def test_a_transactions_end_commits_each_offset_in_its_partitions_group(owner, activity,
                                                                        three):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=spread(
        activity, "clicks", [Record(value=b"v%d" % i) for i in range(30)]))
    store = store_for(activity.cluster)
    parts = [(activity.uuid, "clicks", p) for p in range(3)]
    # No transactional batch was written: no open range, so no marker anywhere, but the
    # offsets of a committed transaction land, each in the group holding its partition.
    marked = store.write_markers(parts, producer_id=7, epoch=0, commit=True, cursors=[
        (activity.uuid, "app", [("clicks", p, 5 + p, "", -1) for p in range(3)])])
    assert marked == dict.fromkeys(parts)
    assert [store.fetch_cursor(activity.uuid, "app", "clicks", p) for p in range(3)] == [5, 6, 7]
    for url in three.values():
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT p.partition, p.held FROM consumer_cursors c "
                "JOIN partitions p ON p.id = c.pid WHERE c.grp = 'app'").fetchall()
        assert all(held for _, held in rows), rows  # each commit in its partition's group
    assert store.cursor_streams() == {activity.uuid}
    assert store.logical_sizes()[activity.uuid] == sum(
        st.bytes for st in store.partition_stats(activity.uuid, "clicks"))


def test_store_list_measures_each_groups_write_rate(owner, operator, activity, three):
    cache.delete_many([f"storegroup:rate:{activity.cluster.name}:{g}" for g in three])
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=3))
    first = {r["name"]: r["msgpersec"] for r in store_group_rows(activity.cluster)}
    assert first == dict.fromkeys(three)  # one look: nothing to compare with yet
    started = time.time()
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[
        Record(value=b"v%d" % i, partition=0) for i in range(300)])
    time.sleep(1.2)
    rows = {r["name"]: r for r in store_group_rows(activity.cluster)}
    span = time.time() - started
    holder = placement.view_of(activity.cluster.name).group_of(activity.uuid, "clicks", 0)
    assert 300 / (span + 1.0) < rows[holder]["msgpersec"] <= 300 / 1.0
    assert all(rows[g]["msgpersec"] == 0 for g in three if g != holder)


def test_a_topics_partitions_spread_even_when_one_group_holds_more(owner, operator, activity):
    """The emptier groups take a new topic's first partitions, but a topic never lands whole
    on one group because another holds more bytes; a lone partition goes to the emptiest."""
    groups = grow(operator, activity.cluster, "s2")
    topic_create(actor=owner, stream=activity, name="big", partitions=1)
    messages_produce(actor=owner, stream=activity, topic="big", records=[
        Record(value=b"x" * 1000, partition=0)] * 50)
    full = placement.view_of(activity.cluster.name).group_of(activity.uuid, "big", 0)
    empty = next(g for g in groups if g != full)
    topic_watermarks(topic_create(actor=owner, stream=activity, name="wide", partitions=5))
    wide = {name: sorted(p for (t, p) in held(url, activity) if t == "wide")
            for name, url in groups.items()}
    assert (len(wide[empty]), len(wide[full])) == (3, 2)
    topic_watermarks(topic_create(actor=owner, stream=activity, name="lone", partitions=1))
    assert placement.view_of(activity.cluster.name).group_of(activity.uuid, "lone", 0) == empty


def test_placement_weighs_bytes_and_write_rate():
    loads = {"s1": placement.Load(900, 4, 10.0), "s2": placement.Load(100, 4, 990.0),
             "s3": placement.Load(500, 9, 0.0)}
    # shares: s1 0.6 + 0.01, s2 0.067 + 0.99, s3 0.33 + 0: s3 is the least loaded, then s1.
    assert placement.least_loaded(loads, 4) == ["s3", "s1", "s2", "s3"]
    unknown = {"s1": placement.Load(0, 2), "s2": placement.Load(0, 1)}
    assert placement.least_loaded(unknown, 3) == ["s2", "s1", "s2"]


def test_placing_a_topic_rereads_its_own_rows_unless_another_change_came_between(
        owner, activity, three):
    """A topic created reads back only its own placement (not a cluster's 100,000 rows, issue
    33) when the version moved by its own bump alone; when another process's change came
    between, the whole placement, that change included."""
    name = activity.cluster.name
    topic_watermarks(topic_create(actor=owner, stream=activity, name="a", partitions=2))
    group = placement.view_of(name).group_of(activity.uuid, "a", 0)
    group_pk = activity.cluster.store_groups.get(name=group).pk
    # A row with no bump (never done for real): only a whole reread would bring it in.
    Placement.objects.create(stream=activity, topic="unseen", partition=0, group_id=group_pk)
    topic_watermarks(topic_create(actor=owner, stream=activity, name="b", partitions=2))
    view = placement.view_of(name)
    assert view.group_of(activity.uuid, "b", 1) is not None
    assert view.group_of(activity.uuid, "unseen", 0) is None
    # Another process's placement, bumped: the next topic's placement sees the version jump.
    Placement.objects.create(stream=activity, topic="elsewhere", partition=0, group_id=group_pk)
    placement.bump(name)
    topic_watermarks(topic_create(actor=owner, stream=activity, name="c", partitions=2))
    view = placement.view_of(name)
    assert {view.group_of(activity.uuid, t, 0) for t in ("elsewhere", "unseen")} == {group}
    assert view.group_of(activity.uuid, "c", 1) is not None


def test_a_spark_job_is_told_each_partition_held_off_the_home_group(owner, activity, three):
    """diffstreams and copystream on Spark read each partition from the group holding it."""
    from replication.stores import job_side

    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=6))
    home, placed = job_side(activity.cluster, activity.uuid)
    by_group = {p.partition: p.group.name for p in Placement.objects.filter(stream=activity)}
    assert home == three["s1"]
    assert placed == tuple(sorted(("clicks", p, three[g]) for p, g in by_group.items()
                                  if g != "s1"))
    assert len(placed) == 4  # 6 partitions over 3 groups: 2 on the home one
