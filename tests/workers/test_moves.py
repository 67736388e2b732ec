"""A large partition's move through the service with its history's first pass copied by Spark
(issue 33, workers/moves.py on a real local session, real PostgreSQL store groups): every
message once and in order at the target with its cursors and producer sequences; a move
whose process (the Spark driver) dies mid-copy leaves the partition where it was, and its
retry completes it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from replication import placement
from replication.engine.producers import ProducerBatch
from replication.engine.store import Record
from replication.services.partitionmove import partition_move
from replication.stores import store_for
from tests.replication.services import test_partition_move as moves
from tests.replication.services.test_partition_move import (
    ROOT,
    holds,
    other,
    produce,
    rows_in,
    values_at_0,
    where,
)
from workers.moves import spark_bulk

pytestmark = pytest.mark.django_db(transaction=True)


_fresh_views = moves._fresh_views
two = moves.two


@pytest.fixture
def small(settings):  # type: ignore[no-untyped-def]
    settings.MOVE_SPARK_BYTES = 1  # every partition goes through Spark
    settings.MOVE_SPARK_SPLIT = 7  # several tasks


def test_a_large_move_copied_by_spark_ends_with_every_message_once_in_order(
        spark, small, operator, owner, activity, two):
    router = store_for(activity.cluster)
    source = where(activity)
    target = other(two, source)
    router.append(activity.uuid, "clicks", [Record(b"p%d" % i, partition=0) for i in range(3)],
                  origin=activity.uuid, sequence=ProducerBatch(7, 0, 0, 3))
    for n in range(6):
        produce(owner, activity, [b"v%d-%d" % (n, i) for i in range(10)])
    router.commit_cursor(activity.uuid, "g1", "clicks", 0, 5)
    state = router.producer_state(activity.uuid, "clicks", 0, 7)
    spans: list[tuple[int, int]] = []

    def bulk(*args):  # type: ignore[no-untyped-def]
        spans.append(args[-2:])
        spark_bulk(*args)

    row = partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                         to=target, bulk=bulk)

    assert spans == [(0, 63)]
    assert row["messagesCopied"] == 63 and where(activity) == target
    assert values_at_0(owner, activity) == [b"p0", b"p1", b"p2"] + [
        b"v%d-%d" % (n, i) for n in range(6) for i in range(10)]
    assert router.fetch_cursor(activity.uuid, "g1", "clicks", 0) == 5
    assert router.producer_state(activity.uuid, "clicks", 0, 7) == state
    assert rows_in(two[source], activity) == 0


def test_below_the_threshold_the_pipe_copies_alone(operator, owner, activity, two):
    produce(owner, activity, [b"x"] * 5)
    called: list = []
    partition_move(actor=operator, stream=activity, topic="clicks", partition=0,
                   to=other(two, where(activity)), bulk=lambda *a: called.append(a))
    assert called == [] and values_at_0(owner, activity) == [b"x"] * 5


CRASHER = """
import os, django
django.setup()
from django.conf import settings
from django.contrib.auth import get_user_model
from replication.models import Stream
from replication.services.partitionmove import partition_move
from workers.moves import spark_bulk
user, stream, to = os.sys.argv[1:]
settings.MOVE_SPARK_BYTES, settings.MOVE_SPARK_SPLIT = 1, 7

def bulk(*args):
    spark_bulk(*args[:-1], args[-2] + 20)  # some tasks committed, then the driver dies
    os._exit(17)

partition_move(actor=get_user_model().objects.get(pk=int(user)),
               stream=Stream.objects.get(pk=int(stream)), topic="clicks", partition=0, to=to,
               bulk=bulk)
"""


def test_a_spark_driver_killed_mid_copy_leaves_the_partition_and_the_retry_completes(
        spark, small, operator, owner, activity, two):
    for n in range(0, 50, 10):
        produce(owner, activity, [b"a%d" % i for i in range(n, n + 10)])
    source = where(activity)
    target = other(two, source)
    params = connection.settings_dict
    env = dict(os.environ, DATABASE_URL=(
        f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}"
        f"/{params['NAME']}"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CRASHER, str(operator.pk), str(activity.pk),
                           target], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 17, done.stderr[-3000:]
    placement.forget()
    assert where(activity) == source and holds(two[source], activity)
    assert not holds(two[target], activity) and rows_in(two[target], activity) > 0
    assert values_at_0(owner, activity) == [b"a%d" % i for i in range(50)]
    assert produce(owner, activity, [b"b"]) == [(0, 50)]

    partition_move(actor=operator, stream=activity, topic="clicks", partition=0, to=target,
                   bulk=spark_bulk)
    assert where(activity) == target
    assert values_at_0(owner, activity) == [b"a%d" % i for i in range(50)] + [b"b"]
    assert rows_in(two[source], activity) == 0


def test_a_rebalance_copies_its_large_partitions_with_spark(spark, small, operator, owner,
                                                            activity, settings, monkeypatch):
    from replication.models import Rebalance
    from replication.services import partitionmove
    from replication.services.rebalance import rebalance_start
    from replication.services.storegroups import store_group_add
    from tests.replication.services.test_rebalance import fill, readable
    from tests.replication.services.test_storegroups import group_url, grow
    from workers import tasks

    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the worker's task, run here by hand
    grow(operator, activity.cluster)
    sizes = [500, 500, 500, 500]
    fill(owner, activity, "clicks", sizes)
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))
    run = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.REBALANCE,
                                   requested_by=operator, state=Rebalance.State.RUNNING,
                                   plan=rebalance_start(actor=operator, dryrun=True,
                                                        cluster=activity.cluster.name)["moves"])
    copied: list[tuple[int, int]] = []

    def bulk(*args, **kwargs):  # type: ignore[no-untyped-def]  # the worker's own, watched
        copied.append(args[-2:])
        spark_bulk(*args, **kwargs)

    monkeypatch.setattr(tasks, "spark_bulk", bulk)
    assert tasks.rebalance_task(run.pk) == Rebalance.State.SUCCEEDED
    assert copied == [(0, 20)] * len(run.plan) and len(run.plan) == 2
    readable(owner, activity, "clicks", sizes)


def test_a_move_run_copied_by_spark_shows_its_progress_as_tasks_finish(
        spark, small, operator, owner, activity, two, settings, monkeypatch):
    from replication.models import Rebalance
    from replication.services.partitionmove import partition_move_plan
    from workers import tasks
    from workers.spark import watch

    settings.CELERY_TASK_ALWAYS_EAGER = False  # the worker's task, run here by hand
    settings.MOVE_SPARK_SPLIT = 5  # 80 tasks
    monkeypatch.setattr(watch, "WATCH", 0.02)
    values = [b"w%d" % i for i in range(400)]
    for at in range(0, 400, 20):
        produce(owner, activity, values[at:at + 20])
    target = other(two, where(activity))
    plan = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=target)
    run = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.MOVE,
                                   requested_by=operator, plan=[plan],
                                   bytes_total=plan["bytes"])
    seen: list[int] = []

    def bulk(*args, progress):  # type: ignore[no-untyped-def]  # the worker's own, watched
        def report(done: int, total: int) -> None:
            progress(done, total)
            seen.append(Rebalance.objects.get(pk=run.pk).percent)

        spark_bulk(*args, progress=report)

    monkeypatch.setattr(tasks, "spark_bulk", bulk)
    assert tasks.rebalance_task(run.pk) == Rebalance.State.SUCCEEDED
    assert seen == sorted(seen) and any(0 < p < 100 for p in seen), seen
    run.refresh_from_db()
    assert run.percent == 100 and where(activity) == target
    assert values_at_0(owner, activity) == values
