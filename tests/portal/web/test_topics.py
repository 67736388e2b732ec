"""The stream page's Topics tab: a topic created, given more partitions, its timestamp type
changed and deleted after its name is typed, each through the topic services with their rules
(topicperm, partitions only grow, changes at the origin), audited with the web as interface;
bad input answered beside its field with nothing changed; another tenant gets 404."""

import re

import pytest

from operations.models import AuditEvent
from replication.models import Topic
from replication.services import replica_add, topic_create, upstream_add
from tests.clients import signed_in

pytestmark = pytest.mark.django_db


def error_of(page: str, field: str) -> str:
    found = re.search(rf'id="err-{field}" role="alert">(.*?)</span>', page, re.S)
    assert found, f"no error beside {field}"
    return found.group(1)


def test_create_a_topic_from_the_tab_with_its_partitions_audited_as_the_web(owner, activity):
    client = signed_in(owner)
    response = client.post(f"/streams/{activity.pk}/topics/create/", {
        "topic": "orders", "partitions": "4", "timestamptype": "logappendtime"})
    assert response.status_code == 302
    assert response["Location"] == f"/streams/{activity.pk}/topics/"
    topic = Topic.objects.get(stream=activity, name="orders")
    assert (topic.partitions, topic.timestamptype) == (4, "logappendtime")
    event = AuditEvent.objects.get(object_type="topic", action="create")
    assert event.interface == "web" and event.actor_name == "alice"
    assert event.object_repr == f"{activity.path}:orders"
    page = client.get(response["Location"]).content.decode()
    assert "topic orders created with 4 partitions" in page
    assert re.search(r'<tr data-topic="orders">', page)


def test_a_topic_created_without_partitions_takes_the_streams_default(owner, activity):
    signed_in(owner).post(f"/streams/{activity.pk}/topics/create/", {"topic": "orders"})
    assert Topic.objects.get(name="orders").partitions == activity.defaultpartitions


@pytest.mark.parametrize(("data", "field", "words"), [
    ({"topic": "no spaces"}, "topic", "invalid topic name"),
    ({"topic": "orders", "partitions": "many"}, "partitions", "whole number"),
    ({"topic": "orders", "partitions": "0"}, "partitions", "from 1 to"),
    ({"topic": "orders", "timestamptype": "sometime"}, "timestamptype", "createtime"),
])
def test_bad_input_to_create_is_shown_beside_its_field_and_creates_nothing(
        owner, activity, data, field, words):
    response = signed_in(owner).post(f"/streams/{activity.pk}/topics/create/", data)
    assert response.status_code == 400
    page = response.content.decode()
    assert words in error_of(page, field)
    assert 'aria-selected="true" aria-current="page">Topics<' in page
    assert f'value="{data["topic"]}"' in page  # what was typed stays
    assert not Topic.objects.exists() and not AuditEvent.objects.filter(
        object_type="topic").exists()


def test_creating_a_topic_that_exists_names_it(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=1)
    response = signed_in(owner).post(f"/streams/{activity.pk}/topics/create/", {
        "topic": "orders", "partitions": "3"})
    assert "already exists" in error_of(response.content.decode(), "topic")
    assert Topic.objects.get(name="orders").partitions == 1


def test_add_partitions_and_change_the_timestamp_type_audited(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    response = signed_in(owner).post(f"/streams/{activity.pk}/topics/edit/", {
        "topic": "orders", "partitions": "5", "timestamptype": "logappendtime"})
    assert response.status_code == 302
    topic = Topic.objects.get(name="orders")
    assert (topic.partitions, topic.timestamptype) == (5, "logappendtime")
    event = AuditEvent.objects.get(object_type="topic", action="edit")
    assert event.interface == "web" and event.before["partitions"] == 2
    assert event.after["partitions"] == 5


def test_partitions_never_shrink_and_the_refusal_is_beside_the_field(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=3)
    response = signed_in(owner).post(f"/streams/{activity.pk}/topics/edit/", {
        "topic": "orders", "partitions": "2"})
    assert response.status_code == 400
    assert "can only grow" in error_of(response.content.decode(), "edit-partitions")
    assert Topic.objects.get(name="orders").partitions == 3
    assert not AuditEvent.objects.filter(object_type="topic", action="edit").exists()


def test_a_replicated_topic_is_changed_and_deleted_at_its_origin_only(owner, activity,
                                                                      activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    client = signed_in(owner)
    page = client.get(f"/streams/{activity_ny.pk}/topics/").content.decode()
    assert "Delete topic orders" not in page  # no button where it would be refused
    response = client.post(f"/streams/{activity_ny.pk}/topics/edit/", {
        "topic": "orders", "partitions": "4"})
    assert "edit it there, at its origin" in error_of(response.content.decode(), "edit-topic")
    response = client.post(f"/streams/{activity_ny.pk}/topics/orders/delete/",
                           {"confirm": "orders"})
    assert response.status_code == 400 and "at its origin" in response.content.decode()
    assert Topic.objects.filter(name="orders").count() == 2


def test_delete_asks_for_the_topics_name_and_deletes_it_everywhere(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    client = signed_in(owner)
    url = f"/streams/{activity.pk}/topics/orders/delete/"
    page = client.get(url).content.decode()
    assert "Type <strong>orders</strong> to confirm" in page and "no undo" in page
    response = client.post(url, {"confirm": "order"})
    assert response.status_code == 400
    assert "type the topic&#x27;s name, orders" in error_of(response.content.decode(), "confirm")
    assert Topic.objects.filter(name="orders").exists()
    response = client.post(url, {"confirm": "orders"})
    assert response.status_code == 302 and not Topic.objects.exists()
    event = AuditEvent.objects.get(object_type="topic", action="delete")
    assert event.interface == "web" and event.actor_name == "alice"


def test_without_topicperm_no_forms_and_every_change_refused(member, owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    client = signed_in(member)
    page = client.get(f"/streams/{activity.pk}/topics/").content.decode()
    assert 'data-topic="orders"' in page
    assert 'id="create-topic"' not in page and "Delete topic" not in page
    response = client.post(f"/streams/{activity.pk}/topics/create/", {"topic": "more"})
    assert response.status_code == 400 and "topicperm" in response.content.decode()
    client.post(f"/streams/{activity.pk}/topics/edit/", {"topic": "orders", "partitions": "9"})
    client.post(f"/streams/{activity.pk}/topics/orders/delete/", {"confirm": "orders"})
    assert list(Topic.objects.values_list("name", "partitions")) == [("orders", 2)]


def test_another_tenant_can_neither_see_nor_change_topics(outsider, owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    client = signed_in(outsider)
    base = f"/streams/{activity.pk}/topics/"
    assert client.get(base).status_code == 404
    assert client.post(base + "create/", {"topic": "spy"}).status_code == 404
    assert client.post(base + "edit/", {"topic": "orders", "partitions": "8"}).status_code == 404
    assert client.get(base + "orders/delete/").status_code == 404
    assert client.post(base + "orders/delete/", {"confirm": "orders"}).status_code == 404
    assert list(Topic.objects.values_list("name", "partitions")) == [("orders", 2)]
