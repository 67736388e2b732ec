"""Every topic a user sees, kept briefly (replication/listings.py, issue 33): read in a few
queries whatever the number of streams, answered from memory while fresh, dropped at once by a
change in this process, and seen within LISTING_SECONDS when another process changed it."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from replication import listings
from replication.models import Stream, Topic
from replication.services import stream_edit, topic_create
from replication.services.names import topic_listing
from tests.factories import StreamFactory, TopicFactory

PERMS = ("produceperm", "consumeperm", "topicperm", "adminperm")


@pytest.fixture(autouse=True)
def _empty():
    listings.forget()


def _names(topics) -> set[str]:  # type: ignore[no-untyped-def]
    return {t.client_name for t in topics}


def _key(user):  # type: ignore[no-untyped-def]
    return listings.key_of(user, "sanfrancisco", "/mapr/sanfrancisco/activity", PERMS)


def test_a_listing_costs_the_same_few_queries_for_one_stream_or_many(
        owner, outsider, activity, django_assert_max_num_queries):
    """One identity lookup per tenant and one query for every topic: not two per stream."""
    TopicFactory(stream=activity, name="t0")
    with django_assert_max_num_queries(6):
        assert _names(topic_listing(actor=owner, cluster="sanfrancisco",
                                    default_stream=activity.path)) == {"t0"}
    for i in range(12):
        stream = StreamFactory(cluster=activity.cluster, name=f"s{i}", created_by=owner)
        TopicFactory(stream=stream, name="t")
    other = StreamFactory(cluster=activity.cluster, name="theirs", created_by=outsider)
    TopicFactory(stream=other, name="t")
    with django_assert_max_num_queries(6):
        listing = topic_listing(actor=owner, cluster="sanfrancisco", default_stream=activity.path)
    # Named plainly in the default stream, by MapR name elsewhere, ordered by stream path.
    assert [t.client_name for t in listing] == ["t0"] + [
        f"/mapr/sanfrancisco/s{i}:t" for i in sorted(range(12), key=str)]
    assert all(t.record.stream is t.stream for t in listing)  # no query per topic after


def test_a_kept_listing_is_answered_without_a_query(owner, activity, django_assert_num_queries):
    TopicFactory(stream=activity, name="t0")
    key = _key(owner)
    assert listings.kept(key) == (None, False)
    listings.read(key, actor=owner)
    with django_assert_num_queries(0):
        topics, due = listings.kept(key)
    assert _names(topics) == {"t0"} and not due


def test_a_topic_created_or_an_ace_changed_here_drops_the_listings(owner, member, activity):
    key = _key(owner)
    listings.read(key, actor=owner)
    topic_create(actor=owner, stream=activity, name="t1", partitions=1)
    assert listings.kept(key) == (None, False)
    assert _names(listings.read(key, actor=owner)) == {"t1"}
    Topic.objects.get(stream=activity, name="t1").delete()
    assert listings.kept(key) == (None, False)
    listings.read(listings.key_of(member, "sanfrancisco", activity.path, PERMS), actor=member)
    stream_edit(actor=owner, stream=activity, consumeperm=f"u:{member.username}")
    assert listings.kept(listings.key_of(member, "sanfrancisco", activity.path, PERMS)) == (
        None, False)


def test_another_processes_change_is_seen_within_the_bound(owner, activity, monkeypatch):
    """A topic inserted with no signal here (as another process's would) shows once the kept
    listing is LISTING_SECONDS old; until half that, the kept one is answered."""
    monkeypatch.setattr(listings, "LISTING_SECONDS", 0.4)
    key = _key(owner)
    listings.read(key, actor=owner)
    # bulk_create sends no post_save: as another process's insert, nothing tells this one.
    Topic.objects.bulk_create([Topic(stream=activity, name="elsewhere",
                                     origin_uuid=activity.uuid)])
    assert _names(listings.kept(key)[0]) == set()
    time.sleep(0.45)
    assert listings.kept(key) == (None, False)
    assert _names(listings.read(key, actor=owner)) == {"elsewhere"}


def test_a_listing_due_is_read_ahead_by_one_caller_while_the_kept_one_is_answered(
        owner, activity, monkeypatch):
    monkeypatch.setattr(listings, "LISTING_SECONDS", 0.4)
    key = _key(owner)
    kept = listings.read(key, actor=owner)
    time.sleep(0.25)
    assert listings.kept(key) == (kept, True)  # this caller reads it afresh
    assert listings.kept(key) == (kept, False)  # the others do not
    fresh = listings.read(key, actor=owner, ahead=True)
    assert listings.kept(key) == (fresh, False)


def test_a_stream_made_invisible_leaves_the_listing_at_once(owner, member, activity):
    """Revoking an ACE here takes the stream's topics out of the very next listing."""
    TopicFactory(stream=activity, name="t0")
    stream_edit(actor=owner, stream=activity, consumeperm=f"u:{member.username}")
    key = listings.key_of(member, "sanfrancisco", activity.path, PERMS)
    assert _names(listings.read(key, actor=member)) == {"t0"}
    stream_edit(actor=owner, stream=Stream.objects.get(pk=activity.pk), consumeperm="")
    topics, _ = listings.kept(key)
    assert topics is None
    assert _names(listings.read(key, actor=member)) == set()


def test_an_unchanged_fingerprint_keeps_the_listing_on_without_reading_it(
        owner, activity, monkeypatch, django_assert_max_num_queries):
    for i in range(5):
        TopicFactory(stream=StreamFactory(cluster=activity.cluster, name=f"s{i}",
                                          created_by=owner), name="t")
    monkeypatch.setattr(listings, "LISTING_SECONDS", 0.2)
    key = _key(owner)
    kept = listings.read(key, actor=owner)
    time.sleep(0.25)
    assert listings.kept(key) == (None, False)
    with django_assert_max_num_queries(5):  # the fingerprint only
        assert listings.read(key, actor=owner) is kept
    assert listings.kept(key) == (kept, False)  # fresh again
    monkeypatch.setattr(listings, "MAX_SECONDS", 0.0)  # read whole at the latest after it
    assert listings.read(key, actor=owner) is not kept


@pytest.mark.parametrize("change", ["ace", "role", "partitions", "deleted"])
def test_another_processes_change_of_what_a_listing_depends_on_is_seen(
        owner, member, activity, monkeypatch, change):
    """Queryset updates and raw deletes send no signal here, as another process's would not:
    the fingerprint still sees each of them within LISTING_SECONDS."""
    from accounts.models import Membership

    monkeypatch.setattr(listings, "LISTING_SECONDS", 0.2)
    TopicFactory(stream=activity, name="t0", partitions=1)
    visible = change in ("partitions", "deleted")
    Stream.objects.filter(pk=activity.pk).update(
        consumeperm=f"u:{member.username}" if visible else "r:admin")
    key = listings.key_of(member, "sanfrancisco", activity.path, PERMS)
    before = listings.read(key, actor=member)
    if change == "ace":
        Stream.objects.filter(pk=activity.pk).update(consumeperm=f"u:{member.username}")
    elif change == "role":
        Membership.objects.filter(user=member).update(role="admin")
    elif change == "partitions":
        Topic.objects.filter(stream=activity).update(partitions=4)
    else:  # a raw delete: Django's queryset delete would send post_delete here
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {Topic._meta.db_table} WHERE stream_id = %s",
                           [activity.pk])
    time.sleep(0.25)
    after = listings.read(key, actor=member)
    assert after is not before
    if change == "partitions":
        assert [t.partitions for t in after] == [4]
    elif change == "deleted":
        assert after == []
    else:
        assert _names(before) == set() and _names(after) == {"t0"}
