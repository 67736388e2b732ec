import pytest

from replication.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied
from replication.models import Topic
from replication.services import (
    replica_add,
    topic_create,
    topic_delete,
    topic_edit,
    upstream_add,
)


@pytest.fixture
def replicated(owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


def test_topic_takes_the_streams_default_partitions(owner, activity):
    activity.defaultpartitions = 6
    activity.save()
    assert topic_create(actor=owner, stream=activity, name="clicks").partitions == 6


def test_topic_operations_need_topicperm(member, activity):
    with pytest.raises(PermissionDenied, match="topicperm"):
        topic_create(actor=member, stream=activity, name="clicks")
    assert not Topic.objects.exists()


@pytest.mark.parametrize("name", ["", "a b", "a:b", "x" * 250, "ü"])
def test_malformed_topic_names_are_refused(owner, activity, name):
    with pytest.raises(InvalidInput, match="topic name"):
        topic_create(actor=owner, stream=activity, name=name)


def test_duplicate_topic_is_refused(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks")
    with pytest.raises(AlreadyExists):
        topic_create(actor=owner, stream=activity, name="clicks")


def test_partitions_only_grow(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=4)
    with pytest.raises(InvalidInput, match="only grow"):
        topic_edit(actor=owner, stream=activity, name="clicks", partitions=3)
    assert topic_edit(actor=owner, stream=activity, name="clicks", partitions=8).partitions == 8


def test_topics_created_later_appear_on_replicas(owner, replicated):
    source, replica = replicated
    topic_create(actor=owner, stream=source, name="late", partitions=2)
    assert replica.topics.get(name="late").origin_uuid == source.uuid


def test_new_partitions_propagate(owner, replicated):
    source, replica = replicated
    topic_create(actor=owner, stream=source, name="clicks", partitions=2)
    topic_edit(actor=owner, stream=source, name="clicks", partitions=5)
    assert replica.topics.get(name="clicks").partitions == 5


def test_replicated_topics_change_only_at_their_origin(owner, replicated):
    source, replica = replicated
    topic_create(actor=owner, stream=source, name="clicks")
    with pytest.raises(InvalidInput, match="at its origin"):
        topic_edit(actor=owner, stream=replica, name="clicks", partitions=9)
    with pytest.raises(InvalidInput, match="at its origin"):
        topic_delete(actor=owner, stream=replica, name="clicks")


def test_deleting_at_the_origin_deletes_the_copies(owner, replicated):
    source, _replica = replicated
    topic_create(actor=owner, stream=source, name="clicks")
    topic_delete(actor=owner, stream=source, name="clicks")
    assert not Topic.objects.filter(name="clicks").exists()


def test_unknown_topic_is_not_found(owner, activity):
    with pytest.raises(NotFound, match="list the stream's topics") as refused:
        topic_edit(actor=owner, stream=activity, name="ghost", partitions=2)
    assert refused.value.hint.action == "topic.list"
