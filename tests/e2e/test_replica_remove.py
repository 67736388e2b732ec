"""Removing a replica in Debian's chromium (issue 34): the confirmation page first (Cancel keeps
the replica), then the stream's page offers to undo the removal, which adds the replica back
with the settings it had."""

import pytest
from playwright.sync_api import Page, expect

from replication.models import ReplicaLink
from replication.services import replica_add, upstream_add
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _link(activity, activity_ny) -> ReplicaLink | None:  # type: ignore[no-untyped-def]
    return off_loop(lambda: ReplicaLink.objects.filter(source=activity,
                                                       replica=activity_ny).first())


def test_remove_asks_first_then_undo_adds_the_replica_back_as_it_was(
        portal_url, page: Page, owner, activity, activity_ny):
    off_loop(replica_add, actor=owner, source=activity, replica=activity_ny, paused=True,
             throttle=True)
    off_loop(upstream_add, actor=owner, replica=activity_ny, source=activity)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/")
    row = page.locator(f'#replicas tr[data-replica="{activity_ny.path}"]')
    remove = page.get_by_role("link", name=f"Remove replica {activity_ny.path}")

    remove.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Remove replica {activity_ny.path}?")
    assert _link(activity, activity_ny) is not None  # asking removed nothing
    assert_accessible(page)
    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(f"{portal_url}/streams/{activity.pk}/")
    expect(row.locator("td.paused")).to_have_text("yes")
    expect(page.locator("#replica-undo")).to_have_count(0)
    assert _link(activity, activity_ny) is not None

    remove.click()
    page.get_by_role("button", name="Remove the replica").click()
    expect(page.locator("ul.messages")).to_contain_text(
        f"{activity_ny.path}: replica removed")
    expect(row).to_have_count(0)
    assert _link(activity, activity_ny) is None
    undo = page.locator("#replica-undo")
    expect(undo).to_contain_text(f"{activity_ny.path} is no longer a replica of this stream")
    assert_accessible(page)

    undo.get_by_role("button", name="Undo: add it back").click()
    expect(page.locator("ul.messages")).to_contain_text(
        f"{activity_ny.path} is a replica again")
    expect(row.locator("td.paused")).to_have_text("yes")
    expect(page.locator("#replica-undo")).to_have_count(0)  # one undo, spent
    link = _link(activity, activity_ny)
    assert link is not None and link.paused and link.throttle and link.agreed
