"""Topic names as clients write them: MapR names, the Kafka-legal spelling, plain names through
default streams (tenant setting, user override, listener option), behind the choke point."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounts.models import Role
from replication import ace
from replication.errors import InvalidInput, NotFound, PermissionDenied
from replication.models import DefaultStream, Stream, Topic
from replication.names import kafka_legal_name, parse_topic_name
from replication.services.defaultstreams import default_stream_for, default_stream_set
from replication.services.names import topic_resolve
from tests.factories import MembershipFactory, TopicFactory

SEGMENT = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,8}", fullmatch=True).filter(
    lambda s: s not in {".", ".."})


@given(cluster=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True),
       segments=st.lists(SEGMENT, min_size=1, max_size=3), topic=SEGMENT)
def test_kafka_legal_spelling_round_trips_and_is_kafka_legal(cluster, segments, topic):
    path = f"/mapr/{cluster}/{'/'.join(segments)}"
    name = kafka_legal_name(path, topic)
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    parsed = parse_topic_name(name)
    assert (parsed.stream_path, parsed.topic, parsed.client_name) == (path, topic, name)


def test_plain_names_with_the_reserved_prefix_are_refused():
    with pytest.raises(InvalidInput, match="reserved"):
        parse_topic_name("__maprorders")
    with pytest.raises(InvalidInput, match="'_' must be followed"):
        parse_topic_name("__mapr.c1_xorders_ct")


@pytest.mark.parametrize("name", ["payments\n", "/mapr/sanfrancisco/kafka:payments\n",
                                  "/mapr/sanfrancisco/acme\n/orders:payments"])
def test_a_name_with_a_trailing_newline_is_refused_not_autocreated(owner, sanfrancisco, name):
    # What the Kafka listener's Produce, Metadata and CreateTopics resolve names with.
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/kafka")
    with pytest.raises(InvalidInput, match="invalid"):
        parse_topic_name(name)
    assert topic_resolve(actor=owner, name=name, create=True) is None  # unknown to Kafka
    assert not Stream.objects.exists() and not Topic.objects.exists()


def test_mapr_name_resolves_through_the_choke_point(owner, outsider, activity):
    TopicFactory(stream=activity, name="clicks")
    found = topic_resolve(actor=owner, name="/mapr/sanfrancisco/activity:clicks")
    assert (found.stream, found.topic, found.partitions) == (activity, "clicks", 1)
    legal = kafka_legal_name(activity.path, "clicks")
    assert topic_resolve(actor=owner, name=legal).client_name == legal
    assert topic_resolve(actor=outsider, name="/mapr/sanfrancisco/activity:clicks") is None
    assert topic_resolve(actor=owner, name="/mapr/sanfrancisco/activity:clicks",
                         cluster="newyork") is None


def test_plain_name_creates_the_default_stream_with_the_tenants_aces(owner, member,
                                                                    sanfrancisco):
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/kafka")
    found = topic_resolve(actor=member, name="orders", create=True)
    stream = Stream.objects.get(path="/mapr/sanfrancisco/kafka")
    assert (found.stream, found.topic, found.client_name) == (stream, "orders", "orders")
    assert stream.tenant == owner.memberships.get().tenant
    assert stream.allows(member, "produceperm") and stream.allows(owner, "topicperm")
    assert not stream.allows(owner, "adminperm")  # the tenant's administrators hold that
    assert ace.parse(stream.adminperm) == ace.parse("r:admin")


def test_another_tenants_same_plain_name_is_another_topic(owner, outsider, sanfrancisco):
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/acme")
    default_stream_set(actor=outsider, cluster="sanfrancisco", path="/mapr/sanfrancisco/globex")
    mine = topic_resolve(actor=owner, name="orders", create=True)
    theirs = topic_resolve(actor=outsider, name="orders", create=True)
    assert mine.stream.path == "/mapr/sanfrancisco/acme"
    assert theirs.stream.path == "/mapr/sanfrancisco/globex"
    assert mine.record.pk != theirs.record.pk


def test_user_override_wins_over_the_tenant_default(owner, member, sanfrancisco):
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/kafka")
    default_stream_set(actor=member, cluster="sanfrancisco", path="/mapr/sanfrancisco/bobs",
                       personal=True)
    assert default_stream_for(actor=member, cluster="sanfrancisco").path == (
        "/mapr/sanfrancisco/bobs")
    assert default_stream_for(actor=owner, cluster="sanfrancisco").path == (
        "/mapr/sanfrancisco/kafka")


def test_plain_name_without_a_default_stream_says_which_setting_is_missing(owner,
                                                                          sanfrancisco):
    heard: list[str] = []
    assert topic_resolve(actor=owner, name="orders", on_missing=heard.append) is None
    assert heard[0] == ("no default stream is set for alice on any cluster: set a default "
                        "stream for plain topic names, or start the listener with one")


def test_listener_default_stream_serves_plain_names(owner, activity):
    TopicFactory(stream=activity, name="orders")
    found = topic_resolve(actor=owner, name="orders", default_stream=activity.path)
    assert found.stream == activity


def test_default_stream_refusals_change_nothing(owner, outsider, sanfrancisco, activity):
    with pytest.raises(InvalidInput, match="not sanfrancisco"):
        default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/newyork/kafka")
    with pytest.raises(NotFound, match="is not available"):
        default_stream_set(actor=outsider, cluster="sanfrancisco", path=activity.path)
    with pytest.raises(NotFound, match="cluster nowhere"):
        default_stream_set(actor=owner, cluster="nowhere", path="/mapr/nowhere/kafka")
    viewer = MembershipFactory(user__username="vic", tenant=owner.memberships.get().tenant,
                               role=Role.VIEWER).user
    with pytest.raises(PermissionDenied, match="member or admin"):
        default_stream_set(actor=viewer, cluster="sanfrancisco", path="/mapr/sanfrancisco/k")
    assert not DefaultStream.objects.exists()


def test_autocreate_follows_the_stream_and_the_aces(owner, member, activity):
    assert topic_resolve(actor=member, name=f"{activity.path}:new", create=True) is None
    Stream.objects.filter(pk=activity.pk).update(autocreate=False)
    assert topic_resolve(actor=owner, name=f"{activity.path}:new", create=True) is None
    Stream.objects.filter(pk=activity.pk).update(autocreate=True)
    assert topic_resolve(actor=owner, name=f"{activity.path}:new", create=True).record
