"""The message browser and the API mark a transaction's records (issue 31): its COMMIT and
ABORT markers (control records), the records of a transaction that aborted and of one still
open; a committed transaction's records and plain ones carry no mark. Another tenant gets
404."""

import re

import pytest
from django.urls import reverse

from replication.engine.store import Record
from replication.services import topic_create
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.clients import signed_in
from tests.factories import ClusterFactory, StreamFactory
from tests.replication.engine.test_batchstore import _transactional

pytestmark = pytest.mark.django_db
# offset -> mark: 81 commits 0-2 (marker 3), 82 aborts 4-5 (marker 6), 83 is open at 7-8,
# and 9 is a plain record.
EXPECTED = {3: "commit marker", 4: "aborted", 5: "aborted", 6: "abort marker", 7: "pending",
            8: "pending"}


@pytest.fixture
def txn_stream(owner, settings):  # type: ignore[no-untyped-def]
    settings.STORE_LAYOUT = "batches"
    stream = StreamFactory(cluster=ClusterFactory(name="browseland"), name="app",
                           created_by=owner)
    topic_create(actor=owner, stream=stream, name="t", partitions=1)
    store = store_for(stream.cluster)
    store.ensure_topic(stream.uuid, "t", 1)
    for producer_id, count, commit in ((81, 3, True), (82, 2, False), (83, 2, None)):
        store.append_batches(stream.uuid, "t", {0: _transactional(count, producer_id, 0)},
                             origin=stream.uuid)
        if commit is not None:
            store.write_marker(stream.uuid, "t", 0, producer_id=producer_id, epoch=0,
                               commit=commit, origin=stream.uuid)
    messages_produce(actor=owner, stream=stream, topic="t", records=[Record(b"plain")])
    return stream


def test_the_browser_marks_markers_and_aborted_and_open_records(owner, txn_stream):
    client = signed_in(owner)
    page = client.get(f"/streams/{txn_stream.pk}/messages/",
                      {"topic": "t", "order": "oldest"}).content.decode()
    rows = re.findall(r'<tr data-offset="0:(\d+)"(?: data-transaction="([^"]+)")?>', page)
    assert sorted(int(o) for o, _ in rows) == list(range(10))  # shown by time, not offset
    assert {int(o): mark for o, mark in rows if mark} == EXPECTED
    assert page.count('class="badge txn-mark"') == len(EXPECTED)
    one = client.get(f"/streams/{txn_stream.pk}/messages/t/0/4/").content.decode()
    assert re.search(r"<dt>Transaction</dt><dd><span [^>]*>aborted</span>", one)
    plain = client.get(f"/streams/{txn_stream.pk}/messages/t/0/9/").content.decode()
    assert "<dt>Transaction</dt>" not in plain


def test_the_api_names_each_messages_transaction_mark(api, owner, outsider, txn_stream):
    url = reverse("api:stream-topic-messages-list",
                  kwargs={"stream_uuid": txn_stream.uuid, "name": "t"})
    found = api(owner).get(url, {"partition": 0}).json()["messages"]
    assert {m["offset"]: m["transaction"] for m in found} == {
        o: EXPECTED.get(o) for o in range(10)}
    assert api(outsider).get(url, {"partition": 0}).status_code == 404
    assert signed_in(outsider).get(f"/streams/{txn_stream.pk}/messages/",
                                   {"topic": "t"}).status_code == 404
