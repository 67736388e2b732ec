"""`streamgate stream topic partition move` (issue 33) against a live portal whose runs go on
in a thread (the embedded default's path): it queues the move, follows the run with a
progress line on a terminal (the copy's percent, chunk by chunk) and prints the result row
as before; -wait false prints the queued run's row; -json prints the finished move's
envelope; a bad move is refused at once in maprcli's words, queuing nothing."""

from __future__ import annotations

import json
import re
import time

import pytest

from replication import placement
from replication.engine import partitionmove as moving
from replication.engine.store import Record
from replication.models import Placement, Rebalance
from replication.services import partitionmove, topic_create
from replication.services.messages import messages_produce
from replication.services.partitionmove import partition_move_plan
from tests.replication.services.test_storegroups import grow
from tests.streamgate.test_cli import streamgate, token_for
from tests.streamgate.test_cli_autosetup import on_a_terminal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def two(monkeypatch, settings, operator, owner, activity):  # type: ignore[no-untyped-def]
    """clicks[0]: 400 messages of 100 bytes in 20 batches; the copy goes 20 offsets a chunk."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    monkeypatch.setattr(moving, "CHUNK_OFFSETS", 20)
    placement.forget()
    urls = grow(operator, activity.cluster, "s2")
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    for _ in range(20):
        messages_produce(actor=owner, stream=activity, topic="clicks",
                         records=[Record(b"z" * 100, partition=0) for _ in range(20)])
    yield urls
    placement.forget()


def placed(activity) -> str:  # type: ignore[no-untyped-def]
    return Placement.objects.get(stream=activity, topic="clicks", partition=0).group.name


def move_args(activity, to: str) -> str:  # type: ignore[no-untyped-def]
    return f"stream topic partition move -path {activity.path} -topic clicks -partition 0 -to {to}"


def test_a_move_on_a_terminal_shows_its_copy_progress_then_the_result_row(
        live_server, operator, activity, two):
    source = placed(activity)
    target = next(n for n in two if n != source)
    size = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=target)["bytes"]
    code, screen, errors = on_a_terminal(live_server.url, token_for(operator),
                                         *move_args(activity, target).split(),
                                         "-throttle", str(size // 3))
    assert code == 0, errors
    run = Rebalance.objects.get()
    progress = re.findall(rf"\rpartition move {run.pk}: (\w+) (\d+)% \(", screen)
    assert ("RUNNING", "0") in progress or ("QUEUED", "0") in progress
    # The copy's chunks, as it goes (99 would be its end: the cut-over, the switch, the
    # clean-up).
    assert len({p for state, p in progress if state == "RUNNING" and 0 < int(p) < 99}) >= 2, \
        screen
    assert progress[-1] == ("SUCCEEDED", "100")
    assert all(int(p) < 100 for state, p in progress[:-1])  # 100 once it succeeded
    header, row = screen.split("\n")[-3:-1]
    assert header.split() == ["partition", "from", "to", "messagesCopied", "seconds", "id"]
    assert row.split()[:4] == ["0", source, target, "400"] and row.split()[5] == str(run.pk)
    assert placed(activity) == target


def test_a_move_without_waiting_prints_the_queued_run(live_server, operator, activity, two):
    target = next(n for n in two if n != placed(activity))
    done = streamgate(live_server.url, token_for(operator),
                      f"{move_args(activity, target)} -wait false -noheader")
    assert done.returncode == 0, done.stderr
    run = Rebalance.objects.get()
    fields = done.stdout.split()
    assert fields[:4] == [str(run.pk), activity.cluster.name, "move", "QUEUED"]
    deadline = time.monotonic() + 60
    while Rebalance.objects.get().state in Rebalance.ACTIVE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert Rebalance.objects.get().state == "SUCCEEDED" and placed(activity) == target


def test_a_move_with_json_prints_the_finished_move(live_server, operator, activity, two):
    source = placed(activity)
    target = next(n for n in two if n != source)
    done = streamgate(live_server.url, token_for(operator), f"{move_args(activity, target)} -json")
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["status"] == "OK"
    [row] = envelope["data"]
    assert {k: row[k] for k in ("partition", "from", "to", "messagesCopied", "id")} == {
        "partition": 0, "from": source, "to": target, "messagesCopied": 400,
        "id": Rebalance.objects.get().pk}


def test_a_bad_move_is_refused_at_once_queuing_nothing(live_server, operator, owner, activity,
                                                       two):
    source = placed(activity)
    done = streamgate(live_server.url, token_for(operator), move_args(activity, source))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"ERROR (16) - partition 0 of {activity.path}:clicks is "
                                  f"already on store group {source}: give another group")
    refused = streamgate(live_server.url, token_for(owner), move_args(activity, "s2") + " -json")
    assert refused.returncode == 1
    assert "only cluster operators" in json.loads(refused.stdout)["errors"][0]["desc"]
    assert not Rebalance.objects.exists() and placed(activity) == source


def test_a_drain_on_a_terminal_shows_its_progress_then_the_finished_run(
        live_server, operator, activity, two):
    """`cluster store drain` (and `rebalance`, the same code) followed on a terminal: a
    progress line with moves and bytes until the run's end, then its row."""
    source = placed(activity)
    size = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=next(n for n in two if n != source))["bytes"]
    code, screen, errors = on_a_terminal(
        live_server.url, token_for(operator), "cluster", "store", "drain", "-cluster",
        activity.cluster.name, "-name", source, "-throttle", str(size // 3))
    assert code == 0, errors
    run = Rebalance.objects.get()
    progress = re.findall(rf"\rdrain {run.pk}: (\w+) (\d+)% \((\d) of 1 moves, ", screen)
    assert len({p for state, p, _ in progress if state == "RUNNING" and 0 < int(p) < 99}) >= 2, \
        screen
    assert progress[-1] == ("SUCCEEDED", "100", "1")
    header, row = screen.split("\n")[-3:-1]
    assert header.split()[:4] == ["id", "cluster", "kind", "group"]
    assert row.split()[:5] == [str(run.pk), activity.cluster.name, "drain", source, "SUCCEEDED"]
    assert placed(activity) != source


def test_a_drain_in_a_script_answers_the_queued_run_at_once(live_server, operator, activity,
                                                           two):
    source = placed(activity)
    done = streamgate(live_server.url, token_for(operator),
                      f"cluster store drain -cluster {activity.cluster.name} -name {source} "
                      "-noheader")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[2:5] == ["drain", source, "QUEUED"]
    deadline = time.monotonic() + 60  # the run goes on in the background
    while Rebalance.objects.get().state in Rebalance.ACTIVE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert Rebalance.objects.get().state == "SUCCEEDED" and placed(activity) != source
