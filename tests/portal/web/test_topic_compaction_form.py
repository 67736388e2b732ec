"""Per-topic compaction in the Topics tab's forms (issue 31): cleanup policy, min compaction
lag, delete retention and dirty ratio set at creation, changed and sent back to the stream's,
through the same services as the CLI; bad input refused beside its field in the CLI's own
words with nothing changed; another tenant gets 404."""

import pytest

from portal.web.hints import form_words
from replication.models import Topic
from replication.services import topic_create
from tests.clients import signed_in
from tests.factories import ClusterFactory, StreamFactory
from tests.portal.test_rest import call, error_of
from tests.portal.web.test_topics import error_of as error_beside

pytestmark = pytest.mark.django_db


@pytest.fixture
def app_stream(owner, settings):  # type: ignore[no-untyped-def]
    settings.STORE_LAYOUT = "batches"  # a compacted topic needs a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="formland"), name="app", created_by=owner)
    topic_create(actor=owner, stream=stream, name="events", partitions=1)
    return stream


def test_a_topic_is_created_compacted_with_its_own_settings(owner, app_stream):
    client = signed_in(owner)
    response = client.post(f"/streams/{app_stream.pk}/topics/create/", {
        "topic": "changelog", "cleanuppolicy": "compact", "mincompactionlag": "1000",
        "deleteretention": "5000", "mincleanabledirtyratio": "0.2"})
    assert response.status_code == 302
    topic = Topic.objects.get(stream=app_stream, name="changelog")
    assert (topic.policy, topic.compaction()) == ("compact", (1000, 5000, 0.2))
    page = client.get(response["Location"]).content.decode()
    assert "topic changelog created with 1 partitions, cleanup policy compact" in page
    assert "changelog (1 partitions, createtime, compact)" in page


def test_a_blank_field_keeps_a_setting_and_stream_or_minus_one_go_back_to_the_streams(
        owner, app_stream):
    client, url = signed_in(owner), f"/streams/{app_stream.pk}/topics/edit/"
    base = {"topic": "events", "partitions": "", "timestamptype": ""}
    assert client.post(url, {**base, "cleanuppolicy": "compact,delete",
                             "mincompactionlag": "700"}).status_code == 302
    topic = Topic.objects.get(stream=app_stream, name="events")
    assert (topic.cleanuppolicy, topic.mincompactionlag) == ("compact,delete", 700)
    assert client.post(url, {**base, "deleteretention": "9"}).status_code == 302
    topic.refresh_from_db()
    assert (topic.cleanuppolicy, topic.mincompactionlag, topic.deleteretention) == (
        "compact,delete", 700, 9)
    assert client.post(url, {**base, "cleanuppolicy": "stream", "mincompactionlag": "-1",
                             "deleteretention": "-1"}).status_code == 302
    topic.refresh_from_db()
    assert (topic.cleanuppolicy, topic.mincompactionlag, topic.deleteretention, topic.policy) \
        == ("", None, None, "delete")


@pytest.mark.parametrize(("field", "typed"), [
    ("cleanuppolicy", "shred"),
    ("mincompactionlag", "soon"),
    ("mincompactionlag", "-5"),
    ("deleteretention", "1.5"),
    ("mincleanabledirtyratio", "2"),
    ("mincleanabledirtyratio", "half"),
])
def test_bad_compaction_input_is_refused_in_the_clis_words_and_changes_nothing(
        api, owner, app_stream, field, typed):
    # The CLI's refusal, its options named as the page's fields (as every page words them).
    cli = form_words(error_of(call(api(owner), "stream/topic/edit", path=app_stream.path,
                                   topic="events", **{field: typed})))
    client = signed_in(owner)
    edited = client.post(f"/streams/{app_stream.pk}/topics/edit/",
                         {"topic": "events", field: typed})
    assert edited.status_code == 400
    assert error_beside(edited.content.decode(), f"edit-{field}") == cli.replace("'", "&#x27;")
    created = client.post(f"/streams/{app_stream.pk}/topics/create/",
                          {"topic": "other", field: typed})
    assert created.status_code == 400
    assert error_beside(created.content.decode(), field) == cli.replace("'", "&#x27;")
    assert list(Topic.objects.filter(stream=app_stream).values_list(
        "name", "cleanuppolicy", "mincompactionlag", "deleteretention",
        "mincleanabledirtyratio")) == [("events", "", None, None, None)]


def test_another_tenants_user_gets_404_and_changes_nothing(outsider, app_stream):
    client = signed_in(outsider)
    assert client.post(f"/streams/{app_stream.pk}/topics/edit/", {
        "topic": "events", "cleanuppolicy": "compact"}).status_code == 404
    assert client.post(f"/streams/{app_stream.pk}/topics/create/", {
        "topic": "mine", "cleanuppolicy": "compact"}).status_code == 404
    assert list(Topic.objects.filter(stream=app_stream).values_list("name", "cleanuppolicy")) \
        == [("events", "")]
