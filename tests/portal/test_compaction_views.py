"""A compacted stream's settings and what compaction did, as the interfaces show them (issue
31): `stream info` on /rest, the API's stream, the line on the stream page; a topic's own
compaction set through the CLI's `stream topic create|edit` and the API; another tenant
sees none of it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from replication.engine.store import Record
from replication.models import Stream, Topic
from replication.services import topic_create
from replication.services.compaction import stream_compact
from replication.services.messages import messages_produce
from tests.clients import signed_in
from tests.factories import ClusterFactory, StreamFactory
from tests.portal.test_rest import call, error_of, ok


@pytest.fixture
def compacted(db, owner, settings):
    settings.STORE_LAYOUT = "batches"  # the cluster's new store is a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="compactland"), name="state",
                           created_by=owner, compact=True, deleteretention=5,
                           mincleanabledirtyratio=0.0)
    topic_create(actor=owner, stream=stream, name="t", partitions=1)
    messages_produce(actor=owner, stream=stream, topic="t", records=[
        Record(b"%d" % i, key=b"k%d" % (i % 2), partition=0, timestamp_ms=1_000 + i)
        for i in range(10)])
    stream_compact(stream=stream, now_ms=1 << 45)
    return stream


def test_stream_info_shows_the_settings_and_what_compaction_removed(api, owner, compacted):
    info = ok(call(api(owner), "stream/info", path=compacted.path))[0]
    assert (info["compact"], info["mincompactionlag"], info["deleteretention"]) == (True, 0, 5)
    assert info["compaction"]["passes"] == 1 and info["compaction"]["messagesremoved"] == 8


def test_the_api_shows_compaction_on_a_stream_and_an_outsider_gets_404(api, owner, outsider,
                                                                      compacted):
    where = reverse("api:stream-detail", kwargs={"uuid": compacted.uuid})
    body = api(owner).get(where).json()
    assert body["compact"] is True and body["compaction"]["messagesremoved"] == 8
    assert api(outsider).get(where).status_code == 404
    edited = api(owner).patch(where, {"deleteretention": -1}, format="json")
    assert edited.status_code == 400 and "deleteretention" in edited.json()


def test_the_stream_settings_tab_has_a_line_on_compaction(owner, compacted):
    page = signed_in(owner).get(f"/streams/{compacted.pk}/settings/").content.decode()
    info = re.search(r'id="stream-info">(.*?)</table>', page, re.S).group(1)
    assert re.search(r"Compaction so far.*?<td>1 passes over 1 partitions: 8 msgs removed, "
                     r"80 bytes reclaimed</td>", info, re.S), info


def test_the_stream_form_creates_a_compacted_stream_or_names_the_conversion(owner, settings):
    settings.STORE_LAYOUT = "batches"
    ClusterFactory(name="compactland")
    client = signed_in(owner)
    made = client.post("/streams/", {"path": "/mapr/compactland/kv", "compact": "on"})
    assert made.status_code == 302
    assert Stream.objects.get(path="/mapr/compactland/kv").compact
    settings.STORE_LAYOUT = "rows"
    ClusterFactory(name="rowland")
    refused = client.post("/streams/", {"path": "/mapr/rowland/kv", "compact": "on"})
    assert refused.status_code == 400 and "manage.py convertstores" in refused.content.decode()
    assert not Stream.objects.filter(path="/mapr/rowland/kv").exists()


@pytest.fixture
def app_stream(db, owner, settings):
    settings.STORE_LAYOUT = "batches"
    stream = StreamFactory(cluster=ClusterFactory(name="topicland"), name="app",
                           created_by=owner)
    topic_create(actor=owner, stream=stream, name="events", partitions=1)
    return stream


def test_the_cli_sets_a_topics_compaction_and_goes_back_to_the_streams(api, owner, app_stream):
    client, path = api(owner), app_stream.path
    ok(call(client, "stream/topic/create", path=path, topic="changelog",
            cleanuppolicy="compact", deleteretention=1000, mincleanabledirtyratio=-1))
    listed = {r["topic"]: r["cleanuppolicy"]
              for r in ok(call(client, "stream/topic/list", path=path))}
    assert listed == {"changelog": "compact", "events": "delete"}
    ok(call(client, "stream/topic/edit", path=path, topic="changelog", cleanuppolicy="stream",
            deleteretention=-1))
    topic = Topic.objects.get(stream=app_stream, name="changelog")
    assert (topic.cleanuppolicy, topic.deleteretention, topic.policy) == ("", None, "delete")
    refused = call(client, "stream/topic/edit", path=path, topic="events",
                   cleanuppolicy="shred")
    assert "is not one of compact, delete, compact,delete, stream" in error_of(refused)
    refused = call(client, "stream/topic/edit", path=path, topic="events",
                   mincleanabledirtyratio="2")
    assert "is not a number from 0 to 1" in error_of(refused)


def test_the_api_sets_a_topics_compaction_and_an_outsider_gets_404(api, owner, outsider,
                                                                   app_stream):
    where = reverse("api:stream-topic-detail", kwargs={"stream_uuid": app_stream.uuid,
                                                       "name": "events"})
    edited = api(owner).patch(where, {"cleanuppolicy": "compact,delete",
                                      "mincompactionlag": 500}, format="json")
    assert edited.status_code == 200, edited.json()
    body = api(owner).get(where).json()
    assert (body["policy"], body["cleanuppolicy"], body["mincompactionlag"]) == (
        "compact,delete", "compact,delete", 500)
    assert body["deleteretention"] is None  # the stream's
    refused = api(owner).patch(where, {"mincompactionlag": -2}, format="json")
    assert refused.status_code == 400 and "mincompactionlag" in refused.json()
    assert api(outsider).patch(where, {"cleanuppolicy": "delete"},
                               format="json").status_code == 404
    assert Topic.objects.get(stream=app_stream, name="events").policy == "compact,delete"


def test_a_replicas_topic_shows_its_origins_policy_and_overrides(api, owner, outsider,
                                                                  app_stream):
    from replication.services import replica_add, topic_edit, upstream_add

    replica = StreamFactory(cluster=ClusterFactory(name="replicaland"), name="app",
                            created_by=owner)
    topic_create(actor=owner, stream=app_stream, name="changelog", partitions=1,
                 cleanuppolicy="compact", deleteretention=1000)
    replica_add(actor=owner, source=app_stream, replica=replica)
    upstream_add(actor=owner, replica=replica, source=app_stream)
    client = api(owner)

    def shown(stream) -> tuple:  # type: ignore[no-untyped-def]
        [part] = ok(call(client, "stream/topic/info", path=stream.path, topic="changelog"))
        where = reverse("api:stream-topic-detail", kwargs={"stream_uuid": stream.uuid,
                                                           "name": "changelog"})
        body = client.get(where).json()
        return ((part["cleanuppolicy"], part["mincompactionlag"], part["deleteretention"],
                 part["mincleanabledirtyratio"]),
                (body["policy"], body["cleanuppolicy"], body["mincompactionlag"],
                 body["deleteretention"], body["mincleanabledirtyratio"]))

    assert shown(replica) == shown(app_stream) == (
        ("compact", 0, 1000, 0.5), ("compact", "compact", None, 1000, None))
    topic_edit(actor=owner, stream=app_stream, name="changelog", cleanuppolicy="stream",
               mincompactionlag=250)  # an edit at the origin follows to the replica
    assert shown(replica) == shown(app_stream) == (
        ("delete", 250, 1000, 0.5), ("delete", "", 250, 1000, None))
    where = reverse("api:stream-topic-detail", kwargs={"stream_uuid": replica.uuid,
                                                       "name": "changelog"})
    assert api(outsider).get(where).status_code == 404
