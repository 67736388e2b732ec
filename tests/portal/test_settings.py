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
