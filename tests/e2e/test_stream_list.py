"""The streams list in Debian's chromium (issue 34): each row's replication health, bytes
stored and produce rate, from what the recorders sampled after messages were produced through
the produce service (REST's, the CLI's): a replicated stream with messages shows them, an idle
one shows that it is idle."""

import time

import pytest
from playwright.sync_api import Page, expect

from operations.throughput import throughput_record
from operations.usage import stored_bytes
from portal.web.templatetags.human import size
from replication.engine.store import Record
from replication.lag_history import lag_record
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.factories import StreamFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("private_cache")]  # the recorders' rings: this test's


def test_health_stored_bytes_and_produce_rate_of_each_listed_stream(
        portal_url, page: Page, owner, activity, activity_ny, sanfrancisco):
    quiet = StreamFactory(cluster=sanfrancisco, name="quiet", created_by=owner)
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=2)
    off_loop(replica_add, actor=owner, source=activity, replica=activity_ny)
    off_loop(upstream_add, actor=owner, replica=activity_ny, source=activity)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/")
    row = page.locator(f'tr[data-stream="{activity.path}"]')
    expect(row.locator("td[data-label=Replication]")).to_have_text("Not sampled yet")
    expect(row.locator("[data-field=stored]")).to_have_text("0 bytes")
    expect(row.locator("[data-field=rate]")).to_have_text("—")  # one sample gives no rate

    start = time.time() - 10
    off_loop(throughput_record, now=start, force=True)
    off_loop(messages_produce, actor=owner, stream=activity, topic="clicks",
             records=[Record(f'{{"click": {i}}}'.encode(), key=b"u1") for i in range(40)])
    off_loop(lag_record)  # no gateway runs: the 40 messages wait for the replica
    off_loop(throughput_record, now=start + 10, force=True)
    stored = off_loop(stored_bytes, [activity])[activity.uuid]
    assert stored > 0

    page.reload()
    expect(row.locator("td[data-label=Replication] .pill")).to_have_text("Pending")
    expect(row.locator("[data-field=stored]")).to_have_text(size(stored))
    expect(row.locator("[data-field=rate]")).to_have_text("4 msg/s")  # 40 in 10 s
    replica = page.locator(f'tr[data-stream="{activity_ny.path}"]')
    expect(replica.locator("td[data-label=Replication] .pill")).to_have_text("Pending")
    expect(replica.locator("[data-field=stored]")).to_have_text("0 bytes")
    expect(replica.locator("[data-field=rate]")).to_have_text("0 msg/s")
    idle = page.locator(f'tr[data-stream="{quiet.path}"]')
    expect(idle.locator("td[data-label=Replication]")).to_have_text("Not replicated")
    expect(idle.locator("[data-field=stored]")).to_have_text("0 bytes")
    expect(idle.locator("[data-field=rate]")).to_have_text("0 msg/s")
