"""A tenant's plan changed by an operator on the admin site, in Debian's chromium, then read on
the Audit page: by the operator, and by the tenant's member, who sees the plan by name."""

import pytest
from playwright.sync_api import Page, expect

from accounts.models import Plan, Tenant
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_plan_set_on_the_admin_site_shows_on_the_audit_page(portal_url, page: Page, owner,
                                                             operator, browser):
    Plan.objects.create(name="starter", max_streams=3)
    tenant = Tenant.objects.get(name="acme")
    sign_in(page, portal_url, "ops")
    page.goto(f"{portal_url}/admin/accounts/tenant/{tenant.pk}/change/")
    page.select_option("select[name=plan]", label="starter")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    page.goto(f"{portal_url}/audit/")
    row = page.locator("tbody tr", has_text='"plan": "starter"').first
    expect(row).to_contain_text("ops")
    expect(row).to_contain_text("admin")
    expect(row.locator('td[data-label="Before"]')).to_contain_text('"plan": null')
    member = browser.new_context().new_page()
    sign_in(member, portal_url, "alice")
    member.goto(f"{portal_url}/audit/")
    expect(member.locator("tbody tr", has_text='"plan": "starter"')).to_have_count(1)
