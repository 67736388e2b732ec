"""Settings fail fast, naming the variable, on values the listener's and the portal's limits
cannot take (portal/settings.py)."""

import os
import subprocess
import sys

import pytest

from tests.workers.conftest import ROOT


@pytest.mark.parametrize(("name", "value", "says"), [
    ("STREAMGATE_KAFKA_MAX_PREAUTH_BYTES", "0", "must be positive"),
    ("STREAMGATE_KAFKA_AUTH_SECONDS", "-1", "must be positive"),
    ("STREAMGATE_KAFKA_FRAME_SECONDS", "0", "must be positive"),
    ("STREAMGATE_KAFKA_CONNECTIONS_PER_IP", "0", "must be positive"),
    ("STREAMGATE_KAFKA_SASL_FAILURE_LIMIT", "0", "must be positive"),
    ("STREAMGATE_KAFKA_MAX_BATCH_BYTES", "1000", "must exceed STREAMGATE_MAX_MESSAGE_BYTES"),
    ("STREAMGATE_MAX_BODY_BYTES", "1000", "must be at least"),
])
def test_a_limit_that_cannot_work_stops_the_start_with_its_name(name, value, says):
    done = subprocess.run([sys.executable, "-c", "import portal.settings"], cwd=ROOT,
                          env={**os.environ, name: value}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert name in done.stderr and says in done.stderr


@pytest.mark.parametrize(("name", "value", "says"), [
    ("STREAMGATE_SIGNUP", "maybe", "use open, approval or off"),
    ("STREAMGATE_SIGNUP_LIMIT", "0", "must be positive"),
    ("EMAIL_URL", "pigeon://loft", "use smtp://"),
])
def test_a_bad_sign_up_mode_or_mail_address_stops_the_start_with_its_name(name, value, says):
    done = subprocess.run([sys.executable, "-c", "import portal.settings"], cwd=ROOT,
                          env={**os.environ, name: value}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert name in done.stderr and says in done.stderr


def test_sign_up_is_open_on_the_embedded_default_and_off_in_production():
    script = "import portal.settings as s; print(s.SIGNUP, s.EMAIL_BACKEND)"
    embedded = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EMAIL_URL",
                                                                  "STREAMGATE_SIGNUP")}
    production = {**embedded, "DATABASE_URL": "postgres://u@127.0.0.1/x"}
    for env, mode in ((embedded, "open"), (production, "off")):
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.split() == [mode, "django.core.mail.backends.console.EmailBackend"]
