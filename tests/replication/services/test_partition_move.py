"""Moving a partition online between store groups (issue 33): everything of the partition
arrives at the target (read there, in its own database) and leaves the source, producers
writing through the move lose and duplicate nothing, refusals change nothing, and a move
killed at any stage leaves the partition in exactly one group and completes when retried
(DESIGN.md invariant 12)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from replication import placement
from replication.engine import fence
from replication.engine import partitionmove as moving
from replication.engine.producers import ProducerBatch
from replication.engine.store import Record
from replication.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    PartitionMoving,
    PermissionDenied,
)
from replication.models import Placement, StoreGroup
from replication.services import partitionmove, topic_create
from replication.services.messages import messages_consume, messages_produce, topic_watermarks
from replication.services.partitionmove import partition_move
from replication.stores import store_for
from tests.replication.engine.test_batchstore import _transactional
from tests.replication.services.test_storegroups import grow, held
from workers.tasks import recover_moves_task

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _fresh_views(monkeypatch):
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    placement.forget()
    yield
    placement.forget()


@pytest.fixture
def two(operator, owner, activity):  # type: ignore[no-untyped-def]
    urls = grow(operator, activity.cluster, "s2")
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=2))
    return urls


def where(activity) -> str:  # type: ignore[no-untyped-def]
    return Placement.objects.get(stream=activity, topic="clicks", partition=0).group.name


def other(urls: dict[str, str], name: str) -> str:
    return next(n for n in urls if n != name)


def rows_in(url: str, activity, table: str = "batches") -> int:  # type: ignore[no-untyped-def]
    """Rows of clicks[0] in the group's database, whatever its held flag."""
    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table} t JOIN partitions p ON p.id = t.pid "
                            "WHERE p.stream = %s AND p.topic = 'clicks' AND p.partition = 0",
                            (activity.uuid,)).fetchone()[0]


def holds(url: str, activity) -> bool:  # type: ignore[no-untyped-def]
    """Whether the group's database holds clicks[0] (after a crash a not-held copy may stay
    until the move is retried: `held` would call that a stray)."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT held FROM partitions WHERE stream = %s AND topic = 'clicks' "
                            "AND partition = 0", (activity.uuid,)).fetchone()[0]


def produce(owner, activity, values: list[bytes]) -> list[tuple[int, int]]:  # type: ignore
    return messages_produce(actor=owner, stream=activity, topic="clicks",
                            records=[Record(v, partition=0) for v in values])


def values_at_0(owner, activity) -> list[bytes]:  # type: ignore[no-untyped-def]
    got: list = []
    while True:
        more = messages_consume(actor=owner, stream=activity, topic="clicks", partition=0,
                                offset=len(got), limit=10_000)
        if not more:
            break
        got += more
    assert [m.offset for m in got] == list(range(len(got)))
    return [m.value for m in got]


def test_an_idle_partition_moves_with_its_history_cursors_and_producers(
        operator, owner, activity, two):
    router = store_for(activity.cluster)
    source = where(activity)
    target = other(two, source)
    router.append(activity.uuid, "clicks", [Record(b"p%d" % i, partition=0) for i in range(3)],
                  origin=activity.uuid, sequence=ProducerBatch(7, 0, 0, 3))
    produce(owner, activity, [b"v%d" % i for i in range(20)])
    router.commit_cursor(activity.uuid, "g1", "clicks", 0, 5)
    state = router.producer_state(activity.uuid, "clicks", 0, 7)
    batches = rows_in(two[source], activity)
    stale = placement.view_of(activity.cluster.name)

    row = partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                         to=target)

    assert row["partition"] == 0 and row["from"] == source and row["to"] == target
    assert row["messagesCopied"] == 23 and row["seconds"] >= 0
    assert where(activity) == target
    assert held(two[target], activity)[("clicks", 0)] == 23
    assert ("clicks", 0) not in held(two[source], activity)  # and nothing stray left there
    assert batches == 2  # as the producers sent them
    assert rows_in(two[target], activity) == batches and rows_in(two[source], activity) == 0
    assert rows_in(two[source], activity, "producer_sequences") == 0
    assert rows_in(two[source], activity, "consumer_cursors") == 0
    assert values_at_0(owner, activity) == [b"p0", b"p1", b"p2"] + [b"v%d" % i
                                                                    for i in range(20)]
    assert router.watermarks(activity.uuid, "clicks")[0] == (0, 23)
    assert router.fetch_cursor(activity.uuid, "g1", "clicks", 0) == 5
    assert router.producer_state(activity.uuid, "clicks", 0, 7) == state
    # The producer's retried batch is still recognised, and its next one continues.
    again = router.append(activity.uuid, "clicks", [Record(b"p%d" % i, partition=0)
                                                    for i in range(3)],
                          origin=activity.uuid, sequence=ProducerBatch(7, 0, 0, 3))
    assert again == [(0, 0), (0, 1), (0, 2)]
    assert router.append(activity.uuid, "clicks", [Record(b"p3", partition=0)],
                         origin=activity.uuid, sequence=ProducerBatch(7, 0, 3, 1)) == [(0, 23)]
    assert held(two[target], activity)[("clicks", 0)] == 24
    # A consumer's commit sent by a process with the old placement is refused at the source
    # and lands at the target.
    with pytest.raises(Exception, match=fence.NOT_HELD):
        stale.stores[source].commit_cursor(activity.uuid, "g1", "clicks", 0, 8)
    placement._views[activity.cluster.name] = stale
    placement._checked[activity.cluster.name] = time.monotonic()
    router.commit_cursor(activity.uuid, "g1", "clicks", 0, 9)
    assert router.fetch_cursor(activity.uuid, "g1", "clicks", 0) == 9
    placement._views[activity.cluster.name] = stale  # replicated cursors, the same way
    placement._checked[activity.cluster.name] = time.monotonic()
    router.merge_cursors(activity.uuid, [("g2", "clicks", 0, 4)])
    assert router.fetch_cursor(activity.uuid, "g2", "clicks", 0) == 4
    assert rows_in(two[source], activity, "consumer_cursors") == 0


def test_transactions_and_a_purged_prefix_move_with_the_partition(operator, activity, two):
    router, key = store_for(activity.cluster), (activity.uuid, "clicks", 0)
    router.append_batches(*key[:2], {0: _transactional(3, 41, 0)}, origin=activity.uuid)
    router.write_marker(*key, producer_id=41, epoch=0, commit=False, origin=activity.uuid)
    router.append_batches(*key[:2], {0: _transactional(2, 41, 3)}, origin=activity.uuid)
    router.append_batches(*key[:2], {0: _transactional(2, 42, 0)}, origin=activity.uuid)
    router.write_marker(*key, producer_id=41, epoch=0, commit=True, origin=activity.uuid)
    while router.trim(*key, 4):  # `stream purge` below offset 4: a prefix of whole batches
        pass
    marks = router.watermarks(*key[:2])[0]
    assert marks[0] > 0
    seen = router.txn_view(*key, 0, marks[1])
    assert seen.stable == 6  # 42's transaction is open from offset 6
    source = where(activity)

    partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                   to=other(two, source))

    assert router.watermarks(*key[:2])[0] == marks
    assert router.txn_view(*key, 0, marks[1]) == seen
    assert router.open_transactions(*key[:2], [0]) == {0: [(42, 6)]}
    # The open transaction completes at the new group, once.
    at = router.write_marker(*key, producer_id=42, epoch=0, commit=True, origin=activity.uuid)
    assert at == marks[1]
    assert router.write_marker(*key, producer_id=42, epoch=0, commit=True,
                               origin=activity.uuid) is None
    assert router.txn_view(*key, 0, at + 1).stable == at + 1


class Producer(threading.Thread):
    """Produces to clicks[0] without pause, keeping what was acknowledged."""

    def __init__(self, owner, activity) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.owner, self.activity = owner, activity
        self.acked: list[tuple[int, bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                values = [b"m%d" % (n + i) for i in range(5)]
                n += 5
                try:
                    placed = produce(self.owner, self.activity, values)
                except Exception as err:  # counted: the test wants none
                    self.errors.append(str(err))
                    continue
                self.acked += [(o, v) for (_, o), v in zip(placed, values, strict=True)]
        finally:
            connection.close()


def test_a_partition_moves_while_a_producer_writes_and_loses_nothing(
        operator, owner, activity, two):
    produce(owner, activity, [b"before%d" % i for i in range(500)])
    source = where(activity)
    producer = Producer(owner, activity)
    producer.start()
    try:
        while len(producer.acked) < 100:
            time.sleep(0.01)
        row = partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                             to=other(two, source))
        during = len(producer.acked)
        while len(producer.acked) < during + 100:
            time.sleep(0.01)
    finally:
        producer.stop.set()
        producer.join(30)
    assert producer.errors == []
    assert row["messagesCopied"] >= 600
    acked = producer.acked
    assert [o for o, _ in acked] == list(range(500, 500 + len(acked)))
    stored = values_at_0(owner, activity)
    assert stored == [b"before%d" % i for i in range(500)] + [v for _, v in acked]
    assert held(two[row["to"]], activity)[("clicks", 0)] == len(stored)
    assert rows_in(two[source], activity) == 0


@pytest.mark.parametrize("cut", [10, 15])  # at a batch's start, and inside one
def test_a_partition_cut_back_while_it_moves_arrives_as_cut(operator, owner, activity, two,
                                                            cut):
    """The chaos soak of 29 Nov (seed 11): a failback cut sanfrancisco's partition back
    (store truncate) while it moved between groups, and writes filled it again; the cut-over
    copied on from where the bulk copy had ended, so the target kept the batches cut away,
    and the failback's drain then met one of them (a duplicate key in `batches`)."""
    produce(owner, activity, [b"old%d" % i for i in range(10)])
    produce(owner, activity, [b"old%d" % i for i in range(10, 20)])
    source = where(activity)
    router = store_for(activity.cluster)

    def pause(stage: str) -> None:
        if stage == "copied":  # the history is at the target: cut it back at the source
            assert router.truncate(activity.uuid, "clicks", 0, cut) == 20 - cut
            produce(owner, activity, [b"new%d" % i for i in range(12)])

    partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                   to=other(two, source), pause=pause)
    stored = values_at_0(owner, activity)
    assert stored == [b"old%d" % i for i in range(cut)] + [b"new%d" % i for i in range(12)]
    assert held(two[other(two, source)], activity)[("clicks", 0)] == cut + 12
    assert produce(owner, activity, [b"after"]) == [(0, cut + 12)]


def refusals(owner, source: str, target: str) -> list[tuple[dict, type, str]]:
    """What a move of clicks[0] refuses: (its arguments, the error, the text naming the fix)."""
    return [
        (dict(actor=owner, to=target), PermissionDenied, "only cluster operators"),
        (dict(topic="nope", to=target), NotFound, "has no topic 'nope'"),
        (dict(partition=7, to=target), InvalidInput, "partitions 0..1"),
        (dict(to="s9"), NotFound, "no store group 's9'"),
        (dict(to=source), Conflict, f"already on store group {source}"),
    ]


def test_refusals_name_the_fix_and_change_nothing(operator, owner, activity, two):
    produce(owner, activity, [b"x"] * 3)
    source = where(activity)
    target = other(two, source)
    for given, error, text in refusals(owner, source, target):
        args = dict(actor=operator, stream=activity, topic="clicks", partition=0) | given
        with pytest.raises(error, match=text):
            partition_move(**args)
    store = placement.view_of(activity.cluster.name).stores[source]
    with moving.move_lock(two[source], moving.pid_of(store, activity.uuid, "clicks", 0)) as mine:
        assert mine
        with pytest.raises(Conflict, match="is being moved already: wait for that move"):
            partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                           to=target)
    StoreGroup.objects.filter(name=target).update(state=StoreGroup.State.DRAINING)
    with pytest.raises(Conflict, match="draining and takes no partitions"):
        partition_move(actor=operator, stream=activity, topic="clicks", partition=0, to=target)
    assert where(activity) == source
    assert held(two[source], activity)[("clicks", 0)] == 3
    assert rows_in(two[target], activity) == 0


def test_a_cluster_of_one_group_has_nowhere_to_move(operator, owner, activity):
    grow(operator, activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    with pytest.raises(NotFound, match="no store group 's2'"):
        partition_move(actor=operator, stream=activity, topic="clicks", partition=0, to="s2")
    with pytest.raises(Conflict, match="has one store group: add another"):
        partition_move(actor=operator, stream=activity, topic="clicks", partition=0, to="s1")


CRASHER = """
import os, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from replication.models import Stream
from replication.services.partitionmove import partition_move
user, stream, to, stage = sys.argv[1:]

def pause(at):
    if at == stage:
        os._exit(17)

partition_move(actor=get_user_model().objects.get(pk=int(user)),
               stream=Stream.objects.get(pk=int(stream)), topic="clicks", partition=0, to=to,
               pause=pause)
"""


def crash_move(operator, activity, to: str, stage: str) -> None:  # type: ignore
    params = connection.settings_dict
    env = dict(os.environ, DATABASE_URL=(
        f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}"
        f"/{params['NAME']}"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CRASHER, str(operator.pk), str(activity.pk),
                           to, stage], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 17, done.stderr[-3000:]


@pytest.mark.parametrize("stage", ["copied", "cut", "switched"])
def test_a_move_killed_at_any_stage_leaves_one_group_and_completes_when_retried(
        operator, owner, activity, two, stage):
    produce(owner, activity, [b"a%d" % i for i in range(50)])
    source = where(activity)
    target = other(two, source)
    crash_move(operator, activity, target, stage)

    placement.forget()
    placed = where(activity)
    assert placed == (target if stage == "switched" else source)
    holders = [n for n, url in two.items() if holds(url, activity)]
    # Never held by a group the placement does not name. Cut over but not switched: held
    # nowhere until the move is retried (writes get NOT_HELD, reads go to the placed group,
    # which has everything). Switched: the first write's NOT_HELD makes the router hold it
    # where placed.
    assert holders == ([placed] if stage == "copied" else [])
    assert values_at_0(owner, activity) == [b"a%d" % i for i in range(50)]
    if stage == "cut":
        with pytest.raises(PartitionMoving, match="moving between store groups; retry"):
            produce(owner, activity, [b"refused"])
    else:
        assert produce(owner, activity, [b"b"]) == [(0, 50)]
        assert [n for n, url in two.items() if holds(url, activity)] == [placed]

    row = partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                         to=target)
    assert row["from"] == source and row["to"] == target
    assert where(activity) == target
    assert produce(owner, activity, [b"c"])[0][0] == 0
    stored = values_at_0(owner, activity)
    assert stored == [b"a%d" % i for i in range(50)] + ([b"c"] if stage == "cut" else
                                                        [b"b", b"c"])
    assert held(two[target], activity)[("clicks", 0)] == len(stored)
    assert ("clicks", 0) not in held(two[source], activity)
    assert rows_in(two[source], activity) == 0


def test_the_sweep_gives_a_partition_cut_over_by_a_dead_move_back_to_its_source(
        operator, owner, activity, two, django_assert_max_num_queries):
    """A move killed between its cut-over and its switch leaves the partition writable
    nowhere; beat's sweep (not a person running the move again) gives it back to its source,
    and leaves alone a partition whose move is running (its lock taken)."""
    produce(owner, activity, [b"a%d" % i for i in range(10)])
    source = where(activity)
    crash_move(operator, activity, other(two, source), "cut")
    placement.forget()
    view = placement.view_of(activity.cluster.name)
    store = view.stores[source]
    [(pid, *_)] = moving.marked(store)
    with moving.move_lock(view.urls[source], pid) as alone:
        assert alone and partitionmove.moves_recover(activity.cluster) == 0  # "running"
    assert recover_moves_task() == 1
    assert moving.marked(store) == [] and where(activity) == source
    assert produce(owner, activity, [b"b"]) == [(0, 10)]
    assert values_at_0(owner, activity) == [b"a%d" % i for i in range(10)] + [b"b"]
    assert recover_moves_task() == 0
    # With nothing to give back, a sweep (every 30 s) reads no placement: at 100,000
    # partitions that read was half a second (issue 33's idle cost).
    with django_assert_max_num_queries(2):
        assert recover_moves_task() == 0


def set_reachable(url: str, reachable: bool) -> None:
    """Let the group's database take connections, or refuse them and end its sessions (as
    when its server is gone)."""
    name = psycopg.conninfo.conninfo_to_dict(url.replace("postgres://", "postgresql://", 1))[
        "dbname"]
    server = psycopg.conninfo.make_conninfo(url.replace("postgres://", "postgresql://", 1),
                                            dbname="postgres")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(reachable).lower()}')
        if not reachable:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s", (name,))


def test_a_move_whose_source_is_gone_after_its_switch_is_done_and_the_sweep_cleans_up(
        operator, owner, activity, two):
    """Past the commit point nothing fails the move: with its source unreachable for the hold
    and the clean-up, the move reports itself done and writes go to the target; once the
    source is back, beat's sweep deletes the copy the move left there."""
    produce(owner, activity, [b"a%d" % i for i in range(10)])
    source = where(activity)
    target = other(two, source)

    def pause(stage: str) -> None:
        if stage == "switched":
            set_reachable(two[source], False)

    try:
        row = partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                             to=target, pause=pause)
    finally:
        set_reachable(two[source], True)
    assert (row["from"], row["to"], row["messagesCopied"]) == (source, target, 10)
    assert where(activity) == target
    assert rows_in(two[source], activity) > 0  # the copy the clean-up could not delete
    assert produce(owner, activity, [b"b"]) == [(0, 10)]

    # The first sweep after the outage may meet pooled sessions the server ended (it logs
    # the group and goes on; the next sweep, 30 s later, finds it).
    assert max(recover_moves_task() for _ in range(2)) == 1
    assert rows_in(two[source], activity) == 0
    assert moving.marked(placement.view_of(activity.cluster.name).stores[source]) == []
    assert recover_moves_task() == 0
    assert values_at_0(owner, activity) == [b"a%d" % i for i in range(10)] + [b"b"]
    assert [n for n, url in two.items() if holds(url, activity)] == [target]


def test_a_repair_from_a_view_older_than_a_finished_move_never_holds_it_at_its_old_group(
        operator, owner, activity, two):
    """A process whose placement was read before a move, repairing the held flags long after
    the move's clean-up (a stalled process): the old group does not take the partition back
    (it may let go at the new one, as any stale repair does: writers get NOT_HELD and look
    again), so nothing is written where nobody reads. A view read after the move, naming the
    old group again (moved back), is obeyed."""
    produce(owner, activity, [b"a", b"b"])
    source = where(activity)
    stale = placement.refresh(activity.cluster.name, None, force=True)
    assert stale.group_of(activity.uuid, "clicks", 0) == source
    partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                   to=other(two, source))
    assert not holds(two[source], activity)
    placement.hold(stale, activity.uuid, "clicks")  # the stalled process's repair
    assert not holds(two[source], activity)  # held nowhere for a moment: writers look again
    assert produce(owner, activity, [b"c"]) == [(0, 2)]
    assert holds(two[other(two, source)], activity) and not holds(two[source], activity)
    partition_move(actor=operator, stream=activity, topic="clicks", partition=0, to=source)
    placement.hold(placement.refresh(activity.cluster.name, None, force=True), activity.uuid,
                   "clicks")
    assert holds(two[source], activity) and not holds(two[other(two, source)], activity)
    assert values_at_0(owner, activity) == [b"a", b"b", b"c"]
