"""The message browser's pages (Django's test client): Older and Newer links that keep the
filters and cover every message once, a start at an offset or a time, a permalink per
message, the shown page downloaded as JSON lines (text as text, other bytes in base64, a
null apart from an empty value); bad positions refused beside their field; another tenant's
messages absent."""

from __future__ import annotations

import base64
import html
import json
import re
import time

from replication.engine.store import Record
from replication.services.messages import messages_produce
from tests.clients import signed_in
from tests.portal.web.test_messages import BASE, browse, orders, shown

__all__ = ["orders"]  # the fixture, shared with the browser's other tests


def link(page: str, name: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" id="page-{name}"', page)
    return html.unescape(found.group(1)) if found else None


def follow(client, url: str) -> str:  # type: ignore[no-untyped-def]
    answer = client.get(url)
    assert answer.status_code == 200, url
    return answer.content.decode()


def test_older_and_newer_pages_keep_the_filters_and_show_each_message_once(owner, activity,
                                                                          orders):
    client = signed_in(owner)
    page = browse(client, activity, limit=10, key="cust", decode="hex")
    assert link(page, "newer") is None and 'Newer</span>' in page  # the top: nothing newer
    seen = [shown(page)]
    while (older := link(page, "older")) is not None:
        assert "key=cust" in older and "decode=hex" in older and "limit=10" in older
        page = follow(client, older)
        seen.append(shown(page))
    assert [len(p) for p in seen] == [10, 10]
    assert sorted(m for one in seen for m in one) == sorted(
        f"{i % 2}:{i // 2}" for i in range(20))
    back = follow(client, link(page, "newer"))
    assert shown(back) == seen[0] and link(back, "newer") is None


def test_a_page_starts_at_an_offset_or_at_a_time(owner, activity, orders):
    client = signed_in(owner)
    page = browse(client, activity, partition=1, at_offset=7, order="oldest", limit=10)
    assert shown(page) == ["1:7", "1:8", "1:9"] and link(page, "newer") is None
    assert shown(follow(client, link(page, "older"))) == [f"1:{o}" for o in range(7)]
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BASE + 15 * 60_000) / 1000))
    page = browse(client, activity, at_time=at, order="oldest", limit=10)
    assert shown(page) == ["1:7", "0:8", "1:8", "0:9", "1:9"]  # messages 15 to 19
    assert 'name="at_time"' in page and f'value="{at}"' in page


def test_bad_positions_are_refused_beside_their_field(owner, activity, orders):
    client = signed_in(owner)
    for params, field, text in (({"at_offset": "-1"}, "at_offset", "is not a whole number"),
                                ({"at_time": "noon"}, "at_time", "is not a time"),
                                ({"before": "0:x"}, None, "is not a page position")):
        answer = client.get(f"/streams/{activity.pk}/messages/", {"topic": "orders", **params})
        page = answer.content.decode()
        assert answer.status_code == 400 and text in html.unescape(page), params
        if field:
            assert f'id="err-{field}" role="alert"' in page
        assert shown(page) == []
    assert client.get(f"/streams/{activity.pk}/messages/download/",
                      {"topic": "orders", "before": "x"}).status_code == 400


def test_each_message_has_a_permalink_that_opens_it_in_full(owner, activity, orders):
    client = signed_in(owner)
    big = "x" * 3000
    messages_produce(actor=owner, stream=activity, topic="orders",
                     records=[Record(big.encode(), key=b"k", partition=1)])
    page = browse(client, activity, partition=1, limit=10)
    url = re.search(r'<a href="(/streams/\d+/messages/orders/1/10/)" class="permalink"',
                    page).group(1)
    one = follow(client, url)
    assert big in one and big not in page  # the browser cuts long values short; not here
    assert "partition 1, offset 10" in one
    context = html.unescape(re.search(r'href="([^"]+)" id="message-context"', one).group(1))
    assert shown(follow(client, context))[0] == "1:10"
    gone = client.get(f"/streams/{activity.pk}/messages/orders/1/99/")
    assert gone.status_code == 404 and "has no message at offset 99" in gone.content.decode()
    bad = client.get(f"/streams/{activity.pk}/messages/orders/5/0/")
    assert bad.status_code == 404 and "partition 5 does not exist" in bad.content.decode()


def test_the_shown_page_downloads_as_json_lines(owner, activity, orders):
    messages_produce(actor=owner, stream=activity, topic="orders", records=[
        Record(None, key=b"\xff\x00", partition=0, headers=(("bin", b"\xfe"), ("none", None))),
        Record(b"", key=None, partition=0, headers=(("blank", b""),))])
    client = signed_in(owner)
    page = browse(client, activity, partition=0, limit=10, order="oldest", from_offset=8)
    url = html.unescape(re.search(r'<a href="([^"]+)" id="download"', page).group(1))
    answer = client.get(url)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("application/x-ndjson")
    assert 'filename="activity-orders.jsonl"' in answer["Content-Disposition"]
    lines = [json.loads(line) for line in answer.content.decode().splitlines()]
    assert [(m["partition"], m["offset"]) for m in lines] == [(0, 8), (0, 9), (0, 10), (0, 11)]
    first = lines[0]
    assert (first["value"], first["value_encoding"]) == ('{"n": 16, "city": "oslo"}', "utf-8")
    assert first["timestamp"] == BASE + 16 * 60_000 and first["time"].startswith("20")
    assert first["headers"] == [{"name": "source", "value": "test", "encoding": "utf-8"}]
    tomb, empty = lines[2], lines[3]
    assert (tomb["value"], tomb["value_encoding"]) == (None, None)
    assert base64.b64decode(tomb["key"]) == b"\xff\x00" and tomb["key_encoding"] == "base64"
    assert tomb["headers"] == [{"name": "bin", "value": "/g==", "encoding": "base64"},
                               {"name": "none", "value": None, "encoding": None}]
    assert (empty["value"], empty["value_encoding"], empty["key"]) == ("", "utf-8", None)


def test_another_tenant_reaches_neither_permalinks_nor_downloads(outsider, activity, orders):
    client = signed_in(outsider)
    for url in (f"/streams/{activity.pk}/messages/orders/0/0/",
                f"/streams/{activity.pk}/messages/download/?topic=orders"):
        answer = client.get(url)
        assert answer.status_code == 404 and "oslo" not in answer.content.decode()


def test_without_consumeperm_the_permalink_and_download_are_refused(member, activity, orders):
    client = signed_in(member)
    one = client.get(f"/streams/{activity.pk}/messages/orders/0/0/")
    assert one.status_code == 403 and "consumeperm" in one.content.decode()
    down = client.get(f"/streams/{activity.pk}/messages/download/?topic=orders")
    assert down.status_code == 400 and "oslo" not in down.content.decode()
