import time

import pytest

from replication.engine.store import Record
from replication.services import stream_edit, topic_create
from replication.services.messages import messages_produce
from replication.services.purge import streams_to_expire
from replication.stores import store_for
from tests.workers.conftest import wait_until
from workers.tasks import expire_messages_task, expire_stream_task


@pytest.fixture
def aged(owner, activity):
    """clicks: three messages two minutes old and two fresh ones, under a one-minute ttl."""
    stream_edit(actor=owner, stream=activity, ttl=60)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    now = int(time.time() * 1000)
    # Two produces: a batch store expires only batches wholly older than the cut, and keeps
    # each produce as one batch.
    for records in ([Record(value=b"old", timestamp_ms=now - 120_000)] * 3,
                    [Record(value=b"new")] * 2):
        messages_produce(actor=owner, stream=activity, topic="clicks", records=records)
    return activity


def low_watermark(stream) -> int:
    return store_for(stream.cluster).watermarks(stream.uuid, "clicks")[0][0]


def test_beat_entry_expires_through_a_real_worker(celery_worker, aged):
    expire_messages_task.delay()
    wait_until(lambda: low_watermark(aged) == 3)
    assert store_for(aged.cluster).watermarks(aged.uuid, "clicks") == {0: (3, 5)}


def test_the_beat_entry_lists_only_streams_holding_messages(owner, aged, activity_ny):
    # 1,500 empty streams made 1,500 tasks a minute (issue 33): a stream with nothing to
    # expire gets none, one whose messages all expired neither.
    store_for(activity_ny.cluster)
    stream_edit(actor=owner, stream=activity_ny, ttl=60)
    topic_create(actor=owner, stream=activity_ny, name="idle", partitions=4)
    assert streams_to_expire() == [aged.pk]
    store_for(aged.cluster).expire(aged.uuid, before_ms=int(time.time() * 1000) + 1000)
    assert streams_to_expire() == []


def test_a_redelivered_expire_task_changes_nothing_more(celery_worker, aged):
    expire_stream_task.delay(aged.pk)
    wait_until(lambda: low_watermark(aged) == 3)
    expire_stream_task.delay(aged.pk)
    expire_stream_task.delay(aged.pk)
    time.sleep(1.0)
    assert store_for(aged.cluster).watermarks(aged.uuid, "clicks") == {0: (3, 5)}


def test_an_expire_task_for_a_deleted_stream_does_nothing(transactional_db):
    assert expire_stream_task.apply(args=[987654]).get() == 0


def test_the_embedded_schedule_finds_its_tasks_on_the_first_tick():
    # In a fresh process, as runembedded starts: nothing has imported the task modules yet.
    import subprocess
    import sys

    check = (
        "import django; django.setup()\n"
        "from workers.celery import app\n"
        "from workers.embedded import start_scheduler\n"
        "start_scheduler(app, tick=3600)\n"
        "print('workers.tasks.expire_messages_task' in app.tasks)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "True", done.stderr[-2000:]
