"""`streamgate stream replica autosetup` follows its copy step to the end, with a progress
line on a terminal, like copystream and diffstreams; -useexistingreplica from the command
line. The copy runs for real (local Spark, tasks eager: the embedded default's path)."""

from __future__ import annotations

import json
import os
import pty
import subprocess

import pytest

from replication.models import ReplicaLink, ReplicaState, Stream
from replication.stores import store_for
from tests.streamgate.test_cli import STREAMGATE, streamgate, token_for
from tests.workers.test_replication import Producer

pytestmark = pytest.mark.django_db(transaction=True)
NY = "/mapr/newyork/activity"


def on_a_terminal(url: str, token: str, *args: str) -> tuple[int, str, str]:
    leader, follower = pty.openpty()
    done = subprocess.run([str(STREAMGATE), *args], stdout=follower, stderr=subprocess.PIPE,
                          timeout=300, env={**os.environ, "STREAMGATE_URL": url,
                                            "STREAMGATE_TOKEN": token})
    os.close(follower)
    screen = os.read(leader, 1 << 16).decode()
    os.close(leader)
    return done.returncode, screen, done.stderr.decode()


def test_autosetup_on_a_terminal_shows_the_copy_progress_until_replicating(
        live_server, settings, spark, owner, activity, clicks):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    Producer(owner, activity)(2000)
    code, screen, errors = on_a_terminal(live_server.url, token_for(owner), "stream", "replica",
                                         "autosetup", "-path", activity.path, "-replica", NY)
    assert code == 0, errors
    assert "\rcopystream job" in screen and "QUEUED 0%" in screen
    assert "SUCCEEDED 100% (2,000 of 2,000 messages" in screen
    assert "copied 2,000 messages" in screen and "replicates from the source now" in screen
    link = ReplicaLink.objects.get(source=activity, replica__path=NY)
    assert (link.replica_state(), link.paused) == (ReplicaState.REPLICATING, False)


def test_autosetup_json_prints_the_finished_copy_job(live_server, settings, spark, owner,
                                                     activity, clicks):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    Producer(owner, activity)(50)
    done = streamgate(live_server.url, token_for(owner),
                      f"stream replica autosetup -path {activity.path} -replica {NY} -json")
    assert done.returncode == 0, done.stderr
    [job] = json.loads(done.stdout)["data"]
    assert (job["kind"], job["state"], job["result"]["messages"]) == (
        "copystream", "SUCCEEDED", 50)
    assert job["options"] == {"autosetup": True}


def test_autosetup_useexistingreplica_from_the_command_line(live_server, settings, spark,
                                                           owner, activity, clicks):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    alice = token_for(owner)
    Producer(owner, activity)(30)
    made = streamgate(live_server.url, alice, f"stream create -path {NY}")
    assert made.returncode == 0, made.stderr
    done = streamgate(live_server.url, alice, f"stream replica autosetup -path {activity.path} "
                                              f"-replica {NY} -useexistingreplica true")
    assert done.returncode == 0, done.stderr
    assert "copied 30 messages" in done.stdout
    replica = Stream.objects.get(path=NY)
    assert sum(high for _, high in store_for(replica.cluster).watermarks(
        replica.uuid, "clicks").values()) == 30


def test_autosetup_of_an_outsider_is_refused_before_any_job(live_server, owner, activity,
                                                            clicks, outsider):
    done = streamgate(live_server.url, token_for(outsider),
                      f"stream replica autosetup -path {activity.path} -replica {NY}")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"ERROR (2) - stream {activity.path} does not exist")
    assert not Stream.objects.filter(path=NY).exists()
