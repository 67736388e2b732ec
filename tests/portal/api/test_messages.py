import base64

import pytest
from django.test import Client

from replication.engine import Record
from replication.services import topic_create
from replication.stores import store_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clicks(owner, activity):
    return topic_create(actor=owner, stream=activity, name="clicks", partitions=2)


def messages_url(stream, topic="clicks"):
    return f"/api/v1/streams/{stream.uuid}/topics/{topic}/messages/"


def cursors_url(stream, topic="clicks"):
    return f"/api/v1/streams/{stream.uuid}/topics/{topic}/cursors/"


def test_produce_utf8_and_consume_base64(api, owner, activity, clicks):
    body = {"records": [{"value": "hello", "key": "k", "headers": {"h": "v"}, "partition": 1}]}
    response = api(owner).post(messages_url(activity), body, format="json")
    assert response.status_code == 201
    assert response.json() == {"offsets": [{"partition": 1, "offset": 0}]}
    got = api(owner).get(messages_url(activity), {"partition": 1}).json()["messages"]
    assert [base64.b64decode(m["value"]) for m in got] == [b"hello"]
    assert got[0]["headers"] == {"h": base64.b64encode(b"v").decode()}
    assert got[0]["origin"] == str(activity.uuid)


def test_produce_base64_round_trips_any_bytes(api, owner, activity, clicks):
    raw = bytes(range(256))
    body = {"encoding": "base64",
            "records": [{"value": base64.b64encode(raw).decode(), "partition": 0}]}
    api(owner).post(messages_url(activity), body, format="json")
    got = api(owner).get(messages_url(activity)).json()["messages"]
    assert base64.b64decode(got[0]["value"]) == raw


@pytest.mark.parametrize("encoding", ["utf-8", "base64"])
def test_a_null_value_is_produced_and_read_as_json_null_apart_from_an_empty_one(
        api, owner, activity, clicks, encoding):
    key = "k" if encoding == "utf-8" else base64.b64encode(b"k").decode()
    records = [{"value": None, "partition": 0, "headers": {"gone": None, "empty": ""}},
               {"value": "", "partition": 0},
               {"value": None, "key": key, "partition": 0}]
    response = api(owner).post(messages_url(activity), {"encoding": encoding,
                                                        "records": records}, format="json")
    assert response.status_code == 201, response.json()
    got = api(owner).get(messages_url(activity), {"encoding": encoding}).json()["messages"]
    assert [m["value"] for m in got] == [None, "", None]
    assert got[0]["headers"] == {"gone": None, "empty": ""}
    assert [m["key"] for m in got] == [None, None, key]
    stored = store_for(activity.cluster).read(activity.uuid, "clicks", 0, 0)
    assert [m.value for m in stored] == [None, b"", None]


def test_a_null_stored_by_a_kafka_client_reads_as_json_null(api, owner, activity, clicks):
    """What the Kafka listener writes for a tombstone (value length -1): a None value."""
    store = store_for(activity.cluster)
    store.ensure_topic(activity.uuid, "clicks", 2)
    store.append(activity.uuid, "clicks", [Record(None, key=b"user-1", partition=1),
                                           Record(b"", partition=1)], origin=activity.uuid)
    for encoding in ("base64", "utf-8"):
        got = api(owner).get(messages_url(activity), {"partition": 1, "encoding": encoding})
        assert [m["value"] for m in got.json()["messages"]] == [None, ""]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "records"),
        ({"records": "x"}, "records"),
        ({"records": [{"key": "no value"}]}, "records[0]"),
        ({"records": [{"value": "x", "colour": "red"}]}, "records[0]"),
        ({"encoding": "base64", "records": [{"value": "%%%"}]}, "records[0]"),
        ({"encoding": "rot13", "records": [{"value": "x"}]}, "encoding"),
        ({"records": [{"value": "x", "partition": -1}]}, "records[0]"),
        ({"records": [{"value": "x", "headers": ["h"]}]}, "records[0]"),
        ({"records": [{"value": "x"}], "producer": 7}, "producer"),
    ],
)
def test_malformed_produce_bodies_write_nothing(api, owner, activity, clicks, body, field):
    response = api(owner).post(messages_url(activity), body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert api(owner).get(messages_url(activity)).json()["messages"] == []


def test_an_outsider_can_neither_produce_nor_consume(api, outsider, activity, clicks):
    body = {"records": [{"value": "x"}]}
    assert api(outsider).post(messages_url(activity), body, format="json").status_code == 404
    assert api(outsider).get(messages_url(activity)).status_code == 404
    assert api(outsider).get(cursors_url(activity)).status_code == 404


def test_a_member_without_produceperm_is_refused(api, member, activity, clicks):
    response = api(member).post(messages_url(activity), {"records": [{"value": "x"}]},
                                format="json")
    assert response.status_code == 403
    assert "produceperm" in response.json()["detail"]


def test_offsets_out_of_range_are_a_clear_400(api, owner, activity, clicks):
    response = api(owner).get(messages_url(activity), {"offset": 5})
    assert response.status_code == 400
    assert "out of range" in response.json()["detail"]


def test_cursors_commit_and_list(api, owner, activity, clicks):
    api(owner).post(messages_url(activity), {"records": [{"value": "x", "partition": 0}] * 3},
                    format="json")
    response = api(owner).post(cursors_url(activity), {"group": "g", "partition": 0,
                                                       "offset": 2}, format="json")
    assert response.status_code == 201
    assert api(owner).get(cursors_url(activity), {"group": "g"}).json() == {
        "cursors": [{"group": "g", "partition": 0, "offset": 2}]
    }



def test_the_browsable_api_shows_the_messages_page(owner, activity, clicks):
    client = Client()
    client.force_login(owner)
    page = client.get(messages_url(activity), headers={"Accept": "text/html"})
    assert page.status_code == 200, page.content[:2000]
    assert "Produce to and consume from one topic" in page.content.decode()
