"""A primary cut off as by a network partition: Patroni, its postmaster and every backend
stopped with SIGSTOP past the leader lease. The synchronous standby is promoted and takes
acknowledged writes; a commit sent to the old primary meanwhile is never acknowledged (with
synchronous_mode_strict it waits for a standby that now follows another leader) and is gone
once the old primary, woken, is demoted and rejoins as a standby. The store group then shows
the new timeline and when it began (replication/engine/copies.py)."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest

from bench.chaos.hafaults import member_pids, signal_all
from bench.hagroup.configs import TTL
from replication.engine.copies import pg_group

pytestmark = pytest.mark.slow


def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout:g}s"
        time.sleep(0.5)


def _roles(ha_group) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {m["name"]: m["role"] for m in ha_group.patroni()["members"]}


def test_a_primary_stopped_past_its_lease_is_replaced_and_acknowledges_nothing(ha_group):
    url = ha_group.url("postgres") + "&connect_timeout=3"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS partition_probe (what text)")
        before = pg_group(conn)
    primary = ha_group.primary()
    old = psycopg.connect(f"postgresql://postgres@127.0.0.1:{ha_group.ports.pg(int(primary[2:]))}"
                          "/postgres", autocommit=True)
    stopped = member_pids(ha_group, primary)
    signal_all(stopped, signal.SIGSTOP)
    outcome: list[object] = []
    try:
        # Sent to the stopped server: it runs only once the server wakes.
        late = threading.Thread(target=lambda: outcome.append(_commit(old)), daemon=True)
        late.start()
        _wait(lambda: (roles := _roles(ha_group)).get(primary) is None and
              sorted(roles.values()) == ["leader", "sync_standby"], 3 * TTL + 30,
              "a new leader with a synchronous standby")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO partition_probe VALUES ('acknowledged')")
    finally:
        signal_all(stopped, signal.SIGCONT)  # Patroni first: it demotes before backends run
    late.join(60)
    old.close()
    assert outcome and isinstance(outcome[0], psycopg.Error), outcome  # never acknowledged
    ha_group.wait_healthy(180)
    assert _roles(ha_group)[primary] in ("replica", "sync_standby")
    with psycopg.connect(url, autocommit=True) as conn:
        rows = sorted(r[0] for r in conn.execute("SELECT what FROM partition_probe"))
        # Patroni calls the member running before its WAL receiver has connected.
        _wait(lambda: len(pg_group(conn).members) == 3, 60, "the old primary streaming")
        after = pg_group(conn)
    assert rows == ["acknowledged"]  # the old primary's local commit was rewound away
    assert after.timeline > before.timeline and after.last_failover is not None
    assert after.copies == 2


def _commit(conn: psycopg.Connection) -> object:
    try:
        conn.execute("INSERT INTO partition_probe VALUES ('partitioned')")
    except psycopg.Error as error:
        return error
    return "acknowledged"
