"""portal/security.py (issue 27): a Content-Security-Policy on every response, nothing inline
left in the templates for it to refuse, and the session and CSRF cookies Secure whenever the
request came over TLS. The browser's side: tests/e2e/test_content_security_policy.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from tests.portal.test_deploy import manage

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
PASSWORD = "correct horse battery staple"  # tests/factories.py


def script_src(policy: str) -> str:
    return next(d for d in policy.split(";") if d.strip().startswith("script-src")).strip()


@pytest.mark.parametrize("path", ["/login/", "/", "/streams/", "/api/v1/", "/admin/login/",
                                  "/healthz", "/no-such-page/"])
def test_every_response_carries_the_policy_and_no_inline_script(client, db, path):
    policy = client.get(path)["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert script_src(policy) == "script-src 'self'"


def test_only_third_party_pages_may_use_inline_styles(client, db):
    own = client.get("/login/")["Content-Security-Policy"]
    admin = client.get("/admin/login/")["Content-Security-Policy"]
    assert "style-src 'self';" in own
    assert "style-src 'self' 'unsafe-inline';" in admin
    assert script_src(admin) == "script-src 'self'"


def test_the_templates_hold_no_inline_script_handler_or_style():
    inline = re.compile(r"<script(?![^>]*\b(?:src=|type=\"application/json\"))[^>]*>"
                        r"|\son[a-z]+\s*=|\sstyle\s*=|<style\b|javascript:", re.IGNORECASE)
    found = [f"{path.relative_to(TEMPLATES)}: {match.group(0)}"
             for path in TEMPLATES.rglob("*.html")
             for match in inline.finditer(path.read_text())]
    assert found == []


def sign_in(**extra: str | bool) -> dict:
    client = Client(enforce_csrf_checks=False)
    response = client.post("/login/", {"username": "alice", "password": PASSWORD}, **extra)
    assert response.status_code == 302, response.content
    return {name: response.cookies[name] for name in ("sessionid", "csrftoken")}


def test_cookies_are_secure_when_the_request_came_over_tls(owner):
    for cookie in sign_in(secure=True).values():
        assert cookie["secure"] is True, cookie.output()
    for cookie in sign_in(HTTP_X_FORWARDED_PROTO="https").values():
        assert cookie["secure"] is True, cookie.output()


def test_cookies_stay_usable_over_plain_http(owner):
    # The embedded portal on http://127.0.0.1 signs in as before.
    assert all(not cookie["secure"] for cookie in sign_in().values())


def test_a_policy_without_default_src_fails_fast():
    result = manage("check", STREAMGATE_CONTENT_SECURITY_POLICY="script-src 'self'")
    assert result.returncode != 0
    assert "STREAMGATE_CONTENT_SECURITY_POLICY must name a default-src" in result.stderr
