"""The message browser: newest first across partitions, filters by partition, offset range,
time range, key and value text, values as UTF-8, pretty JSON or hex, headers and the origin
stream, a live-tail fragment, producing a test message with produceperm (errors beside the
field), and the outsider from another tenant denied."""

import re
import time

import pytest

from replication.engine.store import Record
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_consume, messages_produce
from replication.stores import store_for
from tests.clients import signed_in

BASE = int(time.time() * 1000) - 3_600_000  # an hour ago


@pytest.fixture
def orders(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=2)
    messages_produce(actor=owner, stream=activity, topic="orders", records=[
        Record(f'{{"n": {i}, "city": "{"paris" if i % 3 == 0 else "oslo"}"}}'.encode(),
               key=f"cust-{i % 4}".encode(), partition=i % 2, timestamp_ms=BASE + i * 60_000,
               headers=(("source", b"test"),))
        for i in range(20)])
    return "orders"


def shown(page: str) -> list[str]:
    return re.findall(r'<tr data-offset="(\d+:\d+)"', page)


def browse(client, stream, **params) -> str:
    response = client.get(f"/streams/{stream.pk}/messages/", {"topic": "orders", **params})
    return response.content.decode()


def test_newest_first_across_partitions(owner, activity, orders):
    page = browse(signed_in(owner), activity, limit=10)
    # message i is at partition i % 2, offset i // 2; newest (i = 19) first
    assert shown(page)[:4] == ["1:9", "0:9", "1:8", "0:8"] and len(shown(page)) == 10
    assert 'aria-current="page">Messages<' in page


def test_filters_by_partition_and_offset_range(owner, activity, orders):
    page = browse(signed_in(owner), activity, partition=1, from_offset=2, to_offset=4,
                  order="oldest")
    assert shown(page) == ["1:2", "1:3", "1:4"]


def test_filters_by_time_range(owner, activity, orders):
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BASE + 5 * 60_000) / 1000))
    until = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BASE + 8 * 60_000) / 1000))
    page = browse(signed_in(owner), activity, since=since, until=until, order="oldest")
    # messages 5, 6, 7 (until is exclusive), by time
    assert shown(page) == ["1:2", "0:3", "1:3"]


def test_filters_by_key_and_value_text(owner, activity, orders):
    client = signed_in(owner)
    page = browse(client, activity, key="cust-1")
    assert sorted(shown(page)) == ["1:0", "1:2", "1:4", "1:6", "1:8"]  # i = 1, 5, 9, 13, 17
    page = browse(client, activity, text="paris", key="cust-3")
    assert shown(page) == ["1:7", "1:1"]  # i = 15 and 3: paris and key cust-3


def test_values_as_pretty_json_or_hex_with_headers_and_origin(owner, activity, orders):
    client = signed_in(owner)
    page = browse(client, activity, decode="json", partition=0, to_offset=0)
    assert '"n": 0,\n  "city": "paris"' in page.replace("&quot;", '"')
    assert "<code>source=test</code>" in page and "this stream" in page
    page = browse(client, activity, decode="hex", partition=0, to_offset=0)
    assert "7b 22 6e 22" in page  # {"n"


def test_a_null_value_shows_as_null_and_text_filters_pass_it_by(owner, activity, orders):
    messages_produce(actor=owner, stream=activity, topic="orders", records=[
        Record(None, key=b"gone", partition=0, headers=(("why", None),)),
        Record(b"", key=b"", partition=0, headers=(("why", b""),))])
    client = signed_in(owner)
    page = browse(client, activity, partition=0, from_offset=10, order="oldest")
    assert shown(page) == ["0:10", "0:11"]
    null, empty = page.split('<tr data-offset="0:11"')
    empty = empty.split("</tr>")[0]
    assert 'class="muted null"' in null and 'why=<span class="muted null">' in null
    assert 'class="muted null"' not in empty and "<pre" not in empty
    assert empty.count('class="muted empty"') == 3  # the key, the value, the header's value
    assert shown(browse(client, activity, text="paris", partition=0, from_offset=10)) == []


def test_replicated_messages_name_their_origin_stream(owner, activity, activity_ny, orders):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    found = messages_consume(actor=owner, stream=activity, topic="orders", partition=0, limit=1)
    store = store_for(activity_ny.cluster)
    store.ensure_topic(activity_ny.uuid, "orders", 2)
    # what the gateway writes at the replica: the message with its origin kept
    store.append(activity_ny.uuid, "orders", [Record(found[0].value)], origin=activity.uuid)
    page = signed_in(owner).get(f"/streams/{activity_ny.pk}/messages/",
                                {"topic": "orders"}).content.decode()
    assert f"<code>{activity.path}</code>" in page


def test_bad_filter_shows_beside_its_field_and_keeps_the_rest(owner, activity, orders):
    response = signed_in(owner).get(f"/streams/{activity.pk}/messages/", {
        "topic": "orders", "partition": "7", "key": "cust-1"})
    assert response.status_code == 400
    page = response.content.decode()
    error = re.search(r'id="err-partition" role="alert">([^<]+)<', page).group(1)
    assert "partition 7 does not exist" in error and "0 to 1" in error
    assert 'name="key" value="cust-1"' in page and 'name="partition" min="0" value="7"' in page


def test_live_tail_refetches_the_results_fragment(owner, activity, orders):
    client = signed_in(owner)
    page = browse(client, activity, tail="on", limit=10)
    url = re.search(r'<div id="message-results" hx-get="([^"]+)" hx-trigger="every 2s"',
                    page).group(1).replace("&amp;", "&")
    messages_produce(actor=owner, stream=activity, topic="orders",
                     records=[Record(b"late", partition=0)])
    fragment = client.get(url).content.decode()
    assert fragment.startswith('<div id="message-results"') and "<html" not in fragment
    assert shown(fragment)[0] == "0:10" and "late" in fragment


def test_produce_a_test_message_with_key_and_headers(owner, activity, orders):
    response = signed_in(owner).post(f"/streams/{activity.pk}/messages/produce/", {
        "topic": "orders", "partition": "1", "key": "k1", "value": "hello",
        "headers": "trace=abc\nlang=en"})
    assert response.status_code == 302
    (m,) = messages_consume(actor=owner, stream=activity, topic="orders", partition=1,
                            offset=10)
    assert (m.key, m.value, m.headers) == (b"k1", b"hello", (("trace", b"abc"), ("lang", b"en")))


def test_produce_refusal_shows_beside_the_field_and_keeps_the_input(owner, activity, orders):
    response = signed_in(owner).post(f"/streams/{activity.pk}/messages/produce/", {
        "topic": "orders", "partition": "9", "key": "k1", "value": "hello there"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "partition 9 does not exist" in re.search(
        r'id="err-partition" role="alert">([^<]+)<', page).group(1)
    assert ">hello there</textarea>" in page and 'name="key" value="k1"' in page
    bad = signed_in(owner).post(f"/streams/{activity.pk}/messages/produce/", {
        "topic": "orders", "value": "x", "headers": "no equals sign"})
    assert "header line 1 is not name=value" in bad.content.decode()


def test_produce_needs_produceperm_and_the_form_is_hidden_without_it(member, owner, activity,
                                                                      orders):
    client = signed_in(member)
    assert 'id="produce"' not in client.get(f"/streams/{activity.pk}/messages/").content.decode()
    response = client.post(f"/streams/{activity.pk}/messages/produce/",
                           {"topic": "orders", "value": "x"})
    assert response.status_code == 400 and "needs produceperm" in response.content.decode()
    assert store_for(activity.cluster).watermarks(activity.uuid, "orders")[0][1] == 10


def test_another_tenant_can_neither_browse_nor_produce(outsider, activity, orders):
    client = signed_in(outsider)
    assert client.get(f"/streams/{activity.pk}/messages/").status_code == 404
    assert client.post(f"/streams/{activity.pk}/messages/produce/",
                       {"topic": "orders", "value": "x"}).status_code == 404
