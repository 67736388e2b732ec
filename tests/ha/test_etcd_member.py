"""One etcd member of three killed -9: the other two hold the quorum, Patroni keeps its leader
(no failover, no demotion) and the primary goes on taking writes; the member, started again,
rejoins."""

from __future__ import annotations

import time

import psycopg
import pytest

from bench.hagroup.configs import TTL

pytestmark = pytest.mark.slow


def test_an_etcd_member_lost_changes_no_primary(ha_group):
    primary = ha_group.primary()
    ha_group.kill("etcd0")
    try:
        deadline = time.monotonic() + 2 * TTL  # past a leader key's lifetime, twice
        with psycopg.connect(ha_group.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS etcd_probe (n int)")
            while time.monotonic() < deadline:
                conn.execute("INSERT INTO etcd_probe VALUES (1)")  # waits for the sync standby
                time.sleep(0.5)
        assert ha_group.primary() == primary
        states = {m["name"]: m["state"] for m in ha_group.patroni()["members"]}
        assert set(states.values()) == {"running"}, states
    finally:
        ha_group.start("etcd0")
    ha_group.wait_healthy(60)
