"""The control database (and the cluster store beside it) as a Patroni group: a portal process
given the multi-host DATABASE_URL keeps answering REST produces while the group's primary is
killed -9 with its data folder: 201, or 503 with Retry-After while no primary answers, never a
500; producing resumes by itself, and every acknowledged message is stored once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import requests

from bench.ports import free_port, wait_listening
from bench.processes import stop_process
from replication.engine.factory import create_database, open_store

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

SETUP = """
from knox.models import AuthToken
from accounts.models import Role
from replication.stores import store_for
from tests.factories import ClusterFactory, MembershipFactory, StreamFactory, TopicFactory
import json
user = MembershipFactory(user__username="alice", tenant__name="acme", role=Role.MEMBER).user
stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=user,
                       tenant=user.memberships.get().tenant)
TopicFactory(stream=stream, name="orders", partitions=1)
store_for(stream.cluster).ensure_topic(stream.uuid, "orders", 1)
print(json.dumps({"token": AuthToken.objects.create(user)[1], "stream": str(stream.uuid),
                  "store": store_for(stream.cluster).__class__.__name__}))
"""


@pytest.fixture
def portal(ha_group, tmp_path):  # type: ignore[no-untyped-def]
    database = f"control_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DATABASE_URL": ha_group.url(database),
           "STREAMGATE_NAMESPACE": f"ha-{database}:", "PYTHONPATH": str(ROOT),
           "ALLOWED_HOSTS": "127.0.0.1", "STREAMGATE_LOG_JSON": "false"}
    create_database(env["DATABASE_URL"])
    run = {"cwd": ROOT, "env": env, "check": True, "capture_output": True, "text": True}
    subprocess.run([sys.executable, "manage.py", "migrate", "--no-input"], **run, timeout=300)
    made = json.loads(subprocess.run([sys.executable, "manage.py", "shell", "-c", SETUP],
                                     **run, timeout=120).stdout.strip().splitlines()[-1])
    port = free_port()
    log = (tmp_path / "portal.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
    wait_listening(port, process, 60)
    try:
        yield f"http://127.0.0.1:{port}", made, ha_group.url(f"{database}_store_c1"), env
    finally:
        stop_process(process)


def test_control_primary_killed_portal_answers_503_then_resumes(portal, ha_group):
    base, made, store_url, _env = portal
    url = f"{base}/api/v1/streams/{made['stream']}/topics/orders/messages/"
    session = requests.Session()
    session.headers["Authorization"] = f"Token {made['token']}"
    acked, statuses, sent, died = [], Counter(), 0, None
    deadline = time.monotonic() + 180
    while len([t for t, _ in acked if died and t > died]) < 20:
        assert time.monotonic() < deadline, (statuses, len(acked))
        if died is None and len(acked) >= 20:
            killed = ha_group.primary()
            ha_group.kill(killed, wipe=True)
            died = time.monotonic()
        value, sent = f"v{sent:06d}", sent + 1
        try:
            answer = session.post(url, json={"records": [{"value": value}]}, timeout=30)
        except requests.ConnectionError:
            statuses["connection"] += 1
            continue
        statuses[answer.status_code] += 1
        if answer.status_code == 201:
            acked.append((time.monotonic(), value))
        else:
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"], answer.headers
            time.sleep(0.2)
    print(f"statuses {dict(statuses)}; first 201 "
          f"{min(t for t, _ in acked if t > died) - died:.1f}s after the primary died")
    store = open_store(store_url)
    try:
        stream = uuid.UUID(made["stream"])
        low, _high = store.watermarks(stream, "orders")[0]
        stored = Counter(m.value.decode() for m in store.read(stream, "orders", 0, low,
                                                              limit=100_000))
    finally:
        store.close()
    assert all(stored[v] == 1 for _, v in acked), [v for _, v in acked if stored[v] != 1][:5]
    assert sum(stored.values()) <= sent
    ha_group.start(killed)  # back as a standby, for the tests after this one
    ha_group.wait_healthy(120)


def test_the_control_databases_group_shows_its_members_and_copies(portal, ha_group):
    *_, env = portal
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", "import json; from replication.services."
         "clusters import control_info; print(json.dumps(control_info()))"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=120)
    info = json.loads(shown.stdout.strip().splitlines()[-1])
    assert (len(info["members"]), info["copies"]) == (3, 2), info
    assert sorted(m["role"] for m in info["members"]) == ["leader", "replica", "sync_standby"]
