"""`stream replica repair` (issue 16): the repair verification's divergence alarm offers, over
/rest, /api/v1, the stream page and the CLI. It runs the link's diffstreams -repair as a job
(real Spark), then verifies again, so the alarm clears; refusals change nothing."""

from __future__ import annotations

import os
import subprocess
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from operations.alarms import alarms_evaluate
from operations.models import Alarm, AlarmKind, AuditEvent
from replication import services
from replication.engine.store import Record
from replication.models import Job, ReplicaLink, Stream
from replication.services.verify import link_verify
from replication.stores import store_for
from tests.factories import StreamFactory, replicated_clicks
from tests.streamgate.test_cli import STREAMGATE, token_for
from workers.jobs import job_run

MODELS = (Job, ReplicaLink, AuditEvent)


def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in MODELS}


def diverge(owner, source: Stream, replica: Stream) -> ReplicaLink:  # type: ignore[no-untyped-def]
    """source -> replica agreed, 10 per partition replicated, then the replica's partition 1
    rewritten from offset 4 on; verification has found it."""
    replicated_clicks(owner, source, replica, per_partition=10, value=b"m%d")
    store = store_for(replica.cluster)
    store.truncate(replica.uuid, "clicks", 1, 4)
    store.append(replica.uuid, "clicks", [Record(value=b"bad", partition=1)] * 6,
                 origin=source.uuid)
    link = ReplicaLink.objects.select_related("source__cluster", "replica__cluster").get()
    assert link_verify(link=link)["firstDifference"]["offset"] == 4
    return link


@pytest.fixture
def diverged(owner, activity, activity_ny) -> tuple[Stream, Stream]:
    diverge(owner, activity, activity_ny)
    return activity, activity_ny


def rest(client, command: str, **params: Any):  # type: ignore[no-untyped-def]
    return client.post(f"/rest/{command}", urlencode(params),
                       content_type="application/x-www-form-urlencoded")


@pytest.mark.django_db(transaction=True)  # the job's progress thread writes its row
def test_rest_repair_runs_the_links_diffstreams_repair_and_clears_the_alarm(
        spark, api, owner, diverged):
    source, replica = diverged
    alarms_evaluate()
    alarm = Alarm.objects.open().get(kind=AlarmKind.DIVERGED)
    assert alarm.description.endswith(": repair the replica from its source")
    listed = rest(api(owner), "alarm/list", alarm=AlarmKind.DIVERGED.value).json()["data"]
    assert [row["description"] for row in listed] == [  # the command line names the command
        f"{alarm.description} with 'streamgate stream replica repair -path {source.path} "
        f"-replica {replica.path}'"]
    body = rest(api(owner), "stream/replica/repair", path=source.path,
                replica=replica.path).json()
    assert body["status"] == "OK", body
    [row] = body["data"]
    assert (row["kind"], row["state"], row["src"], row["dst"]) == (
        "diffstreams", "QUEUED", source.path, replica.path)
    assert job_run(job_id=row["id"]) == Job.State.SUCCEEDED
    job = Job.objects.get(pk=row["id"])
    assert [(r["topic"], r["partition"], r["from"]) for r in job.result["repaired"]] == [
        ("clicks", 1, 4)]
    link = ReplicaLink.objects.get()
    assert link.verify_error == "" and link.verified_upto == {"clicks:0": 10, "clicks:1": 10}
    alarms_evaluate()
    assert not Alarm.objects.open().filter(kind=AlarmKind.DIVERGED).exists()
    [event] = AuditEvent.objects.filter(action="repair")
    assert (event.actor, event.interface, event.after["job"]) == (owner, "rest", job.pk)


@pytest.mark.django_db
@pytest.mark.parametrize(("who", "path", "replica", "status", "says"), [
    ("bob", "/mapr/sanfrancisco/activity", "/mapr/newyork/activity", 403, "adminperm"),
    ("mallory", "/mapr/sanfrancisco/activity", "/mapr/newyork/activity", 404, "does not exist"),
    ("alice", "/mapr/newyork/activity", "/mapr/sanfrancisco/activity", 404, "not a replica"),
])
def test_rest_repair_refusals_change_nothing(api, owner, member, outsider, diverged, who, path,
                                             replica, status, says):
    user = {"alice": owner, "bob": member, "mallory": outsider}[who]
    before = snapshot()
    response = rest(api(user), "stream/replica/repair", path=path, replica=replica)
    body = response.json()
    assert response.status_code == status and body["status"] == "ERROR", body
    assert says in body["errors"][0]["desc"]
    assert snapshot() == before


@pytest.mark.django_db
def test_repair_of_a_never_agreed_replica_or_twice_at_once_is_refused(api, owner, activity,
                                                                      activity_ny, diverged):
    source, replica = diverged
    waiting = StreamFactory(cluster=activity_ny.cluster, name="waiting", created_by=owner)
    services.replica_add(actor=owner, source=source, replica=waiting)
    before = snapshot()
    response = rest(api(owner), "stream/replica/repair", path=source.path, replica=waiting.path)
    assert response.status_code == 409 and "has not accepted" in response.json()["errors"][0][
        "desc"]
    assert snapshot() == before
    job = rest(api(owner), "stream/replica/repair", path=source.path,
               replica=replica.path).json()["data"][0]
    again = rest(api(owner), "stream/replica/repair", path=source.path, replica=replica.path)
    assert again.status_code == 409
    assert f"runs already (job {job['id']})" in again.json()["errors"][0]["desc"]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_api_repair_answers_the_job_and_refuses_a_member_and_an_outsider(api, owner, member,
                                                                          outsider, diverged):
    source, replica = diverged
    url = f"/api/v1/streams/{source.uuid}/replicas/{replica.uuid}/repair/"
    before = snapshot()
    response = api(member).post(url, format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert api(outsider).post(url, format="json").status_code == 404
    assert snapshot() == before
    response = api(owner).post(url, format="json")
    assert response.status_code == 202, response.json()
    job = Job.objects.get()
    assert response.json()["id"] == job.pk and job.options == {"repair": True,
                                                               "link": ReplicaLink.objects
                                                               .get(replica=replica).pk}


@pytest.mark.django_db
def test_the_stream_page_offers_repair_on_a_diverged_replica_only_and_starts_the_job(
        owner, outsider, diverged):
    source, replica = diverged
    client = Client()
    client.force_login(owner)
    assert ">Repair</button>" in client.get(f"/streams/{source.pk}/replication/").content.decode()
    link = ReplicaLink.objects.get()
    stranger = Client()
    stranger.force_login(outsider)
    assert stranger.post(f"/streams/{source.pk}/repair/{link.pk}/").status_code == 404
    assert not Job.objects.exists()
    response = client.post(f"/streams/{source.pk}/repair/{link.pk}/", follow=True)
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert f"repair of {replica.path} started" in response.content.decode()
    ReplicaLink.objects.update(verify_error="")
    assert ">Repair</button>" not in client.get(
        f"/streams/{source.pk}/replication/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_cli_repair_follows_the_job_to_the_repaired_replica(live_server, settings, spark, owner,
                                                            outsider, activity, activity_ny):
    diverge(owner, activity, activity_ny)
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the job runs beside the portal, on its Spark
    env = {**os.environ, "STREAMGATE_URL": live_server.url}

    def repair(user) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
        return subprocess.run(
            [str(STREAMGATE), "stream", "replica", "repair", "-path", activity.path,
             "-replica", activity_ny.path], capture_output=True, text=True, timeout=180,
            env={**env, "STREAMGATE_TOKEN": token_for(user)})

    refused = repair(outsider)
    assert refused.returncode != 0 and "does not exist" in refused.stdout + refused.stderr
    done = repair(owner)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "repaired clicks:1: recopied 6 messages from offset 4" in done.stdout
    assert ReplicaLink.objects.get().verify_error == ""
