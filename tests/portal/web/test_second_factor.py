"""The optional TOTP second factor: set up on the account page (URI and key shown, confirmed
with a code, recovery codes shown once and kept hashed), asked for after the password at
sign-in (a wrong or replayed code refused, a recovery code used once), and turned off with a
code. A password alone no longer makes an API token nor signs in to the admin."""

from __future__ import annotations

import base64
import html
import re
import time

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts import totp
from accounts.models import RecoveryCode, TotpDevice
from accounts.tokens import issue_token

PASSWORD = "correct horse battery staple"  # tests/factories.py


@pytest.fixture(autouse=True)
def _own_failure_counts(private_cache):
    """Wrong codes count as failed sign-ins (accounts/throttle.py), kept in the cache: a cache
    of each test's own, so runs sharing Redis do not add up each other's."""


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def code(secret: str, steps_ahead: int = 0) -> str:
    return totp.code_at(secret, time.time() + 30 * steps_ahead)


def turn_on(user) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """The second factor set up through the page: its secret and the recovery codes."""
    client = signed_in(user)
    client.post("/account/totp/start/")
    secret = TotpDevice.objects.get(user=user).secret
    page = client.post("/account/totp/confirm/", {"code": code(secret)}).content.decode()
    return secret, re.findall(r"<li><code>([a-z0-9]{5}-[a-z0-9]{5})</code></li>", page)


def password_step(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    answer = client.post("/login/", {"username": user.get_username(), "password": PASSWORD})
    assert answer["Location"] == "/login/code/"
    return client


def test_setting_up_shows_the_uri_and_key_then_a_code_confirms_it(owner):
    client = signed_in(owner)
    client.post("/account/totp/start/")
    device = TotpDevice.objects.get(user=owner)
    page = html.unescape(client.get("/account/").content.decode())
    assert f"otpauth://totp/streamgate%3Aalice?secret={device.secret}" in page
    assert device.secret in page and not device.confirmed
    wrong = client.post("/account/totp/confirm/", {"code": "000000"})
    assert wrong.status_code == 400 and "that code is wrong" in wrong.content.decode()
    assert not TotpDevice.objects.get().confirmed
    done = client.post("/account/totp/confirm/", {"code": code(device.secret)})
    codes = re.findall(r"<li><code>([a-z0-9]{5}-[a-z0-9]{5})</code></li>", done.content.decode())
    assert done.status_code == 200 and len(codes) == 10
    assert TotpDevice.objects.get().confirmed
    kept = set(RecoveryCode.objects.values_list("code_hash", flat=True))
    assert len(kept) == 10 and not any(c.replace("-", "") in h for c in codes for h in kept)
    again = client.get("/account/").content.decode()
    assert codes[0] not in again and "10 recovery code(s) left" in again


def test_sign_in_asks_for_the_code_after_the_password(owner):
    secret, _ = turn_on(owner)
    client = password_step(owner)
    assert client.get("/account/").status_code == 302  # not signed in yet
    wrong = client.post("/login/code/", {"code": "123456"})
    assert wrong.status_code == 400 and "wrong or already used" in wrong.content.decode()
    done = client.post("/login/code/", {"code": code(secret, 1)})
    assert done.status_code == 302 and client.get("/account/").status_code == 200


def test_a_code_once_accepted_is_refused_when_replayed(owner):
    secret, _ = turn_on(owner)
    used = code(secret, 1)
    assert password_step(owner).post("/login/code/", {"code": used}).status_code == 302
    replay = password_step(owner)
    assert replay.post("/login/code/", {"code": used}).status_code == 400
    assert replay.get("/account/").status_code == 302


def test_a_recovery_code_signs_in_once(owner):
    _, codes = turn_on(owner)
    assert password_step(owner).post("/login/code/", {"code": codes[3]}).status_code == 302
    again = password_step(owner).post("/login/code/", {"code": codes[3]})
    assert again.status_code == 400
    assert RecoveryCode.objects.count() == 9


def test_five_wrong_codes_ask_for_the_password_again(owner):
    secret, _ = turn_on(owner)
    client = password_step(owner)
    for _ in range(4):
        assert client.post("/login/code/", {"code": "000000"}).status_code == 400
    assert client.post("/login/code/", {"code": "000000"})["Location"] == "/login/"
    assert client.post("/login/code/", {"code": code(secret, 1)})["Location"] == "/login/"
    assert client.get("/account/").status_code == 302


def test_wrong_codes_count_in_the_sign_in_rate_limit(owner, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    secret, _ = turn_on(owner)
    first = password_step(owner)
    for _ in range(2):
        assert first.post("/login/code/", {"code": "000000"}).status_code == 400
    second = password_step(owner)  # starting again does not start the count again
    assert second.post("/login/code/", {"code": "000000"}).status_code == 400
    assert second.post("/login/code/", {"code": code(secret, 1)})["Location"] == "/login/"
    refused = Client().post("/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 429


def test_the_code_step_without_a_password_step_goes_back_to_sign_in(db):
    assert Client().get("/login/code/")["Location"] == "/login/"


def test_turning_it_off_needs_a_right_code(owner):
    secret, _ = turn_on(owner)
    client = signed_in(owner)
    refused = client.post("/account/totp/disable/", {"code": "999999"})
    assert refused.status_code == 400 and TotpDevice.objects.exists()
    done = client.post("/account/totp/disable/", {"code": code(secret, 1)}, follow=True)
    assert "the second factor is off" in done.content.decode()
    assert not TotpDevice.objects.exists() and not RecoveryCode.objects.exists()
    assert Client().post("/login/", {"username": "alice", "password": PASSWORD}
                         )["Location"] == "/"


def test_a_password_alone_makes_no_api_token_nor_signs_in_to_the_admin(owner):
    owner.is_staff = True
    owner.save()
    turn_on(owner)
    pair = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    refused = APIClient().post("/api/v1/auth/login/", HTTP_AUTHORIZATION=f"Basic {pair}")
    assert refused.status_code == 401 and "second factor" in refused.json()["detail"]
    rest = APIClient().get("/rest/stream/list", HTTP_AUTHORIZATION=f"Basic {pair}")
    assert rest.status_code == 401
    admin = Client().post("/admin/login/", {"username": "alice", "password": PASSWORD})
    assert admin.status_code == 200 and "sign in with a second factor" in admin.content.decode()
    token = issue_token(owner, name="still works", scope="read")[1]
    assert APIClient().get("/api/v1/streams/", HTTP_AUTHORIZATION=f"Token {token}"
                           ).status_code == 200


def test_the_second_factor_pages_need_a_sign_in(db):
    for path in ("/account/totp/start/", "/account/totp/confirm/", "/account/totp/disable/"):
        assert Client().post(path, {"code": "123456"}).status_code == 302


def test_another_users_code_does_not_turn_off_alices(owner, outsider):
    secret, _ = turn_on(owner)
    refused = signed_in(outsider).post("/account/totp/disable/", {"code": code(secret, 1)})
    assert refused.status_code == 400
    assert TotpDevice.objects.filter(user=owner, confirmed=True).exists()


def qr_modules(svg: str) -> list[list[int]]:
    """The dark modules of segno's inline SVG (one path of runs: M/m moves, h draws a run on
    the row y - 0.5), as a grid of 0 (light) and 1 (dark)."""
    size = int(re.search(r'd="M0 0h(\d+)v', svg).group(1))
    runs = re.search(r'class="qrline"[^>]* d="([^"]+)"', svg).group(1)
    grid = [[0] * size for _ in range(size)]
    x = y = 0.0
    for op, a, b in re.findall(r"([Mmh])(-?[\d.]+)(?: (-?[\d.]+))?", runs):
        if op == "M":
            x, y = float(a), float(b)
        elif op == "m":
            x, y = x + float(a), y + float(b)
        else:
            for column in range(int(x), int(x + float(a))):
                grid[int(y)][column] = 1
            x += float(a)
    return grid


def decoded(svg: str) -> str:
    """What a QR reader (OpenCV's) reads from the code drawn as the SVG says."""
    import cv2
    import numpy

    image = (1 - numpy.array(qr_modules(svg), dtype=numpy.uint8)) * 255
    image = cv2.resize(image, None, fx=8, fy=8, interpolation=cv2.INTER_NEAREST)
    # OpenCV's classic detector misses about one code in ten of these (a finder pattern it
    # does not locate, depending on the secret's modules): its ArUco-based one reads those.
    for detector in (cv2.QRCodeDetector(), cv2.QRCodeDetectorAruco()):
        text, _, _ = detector.detectAndDecode(image)
        if text:
            return text
    return ""


def test_setting_up_shows_a_qr_code_of_the_uri_drawn_inline(owner):
    client = signed_in(owner)
    client.post("/account/totp/start/")
    device = TotpDevice.objects.get(user=owner)
    page = client.get("/account/").content.decode()
    svg = re.search(r'<svg role="img" id="totp-qr".*?</svg>', page, re.S).group(0)
    assert "<title>QR code of the setup URI" in svg and "http" not in svg  # nothing fetched
    assert decoded(svg) == totp.provisioning_uri(device.secret, account="alice")
    client.post("/account/totp/confirm/", {"code": code(device.secret)})
    assert 'id="totp-qr"' not in client.get("/account/").content.decode()  # once on: gone
