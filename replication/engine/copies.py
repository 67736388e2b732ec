"""A message store's servers as its caller sees them: the members of its replicated group
(PostgreSQL's primary and standbys, as the primary's pg_stat_replication and replication slots
list them), their roles, lag and the time of the last failover, and how many copies a commit is
on before it is acknowledged. Read from the primary alone, so it works the same under Patroni,
another manager or none (a single server shows one member)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import psycopg

# On the primary: each connected standby, whether the primary waits for it at commit, and how
# far its replay is behind the primary's WAL (bytes, seconds).
STANDBYS = """
SELECT application_name, sync_state, state,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint,
       coalesce(extract(epoch FROM replay_lag), 0)::float8
FROM pg_stat_replication ORDER BY application_name
"""
# Physical slots nobody streams from: a standby that is down (Patroni keeps a slot per member
# while the member is registered), with how much WAL it has yet to receive.
ABSENT = """
SELECT slot_name, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT active ORDER BY slot_name
"""
PRIMARY = "SELECT coalesce(host(inet_server_addr()), 'local') || ':' || " \
          "coalesce(inet_server_port(), 0), current_setting('synchronous_commit'), " \
          "(SELECT timeline_id FROM pg_control_checkpoint()), " \
          "has_function_privilege('pg_ls_waldir()', 'execute')"
# A promotion starts a timeline and writes its history file on the promoted server, which is
# the primary until the next one: the newest file's time is the last failover (or switchover).
PROMOTED = r"""
SELECT name, modification FROM pg_ls_waldir()
WHERE name ~ '^[0-9A-F]{8}\.history$' ORDER BY name DESC LIMIT 1
"""
LEADER, SYNC_STANDBY, REPLICA = "leader", "sync_standby", "replica"  # as `patronictl list`


@dataclass(frozen=True)
class Member:
    name: str
    role: str  # leader, sync_standby (a commit waits for it) or replica
    state: str  # serving (the leader), streaming, catchup, ... (pg_stat_replication's), down
    lag_bytes: int = 0
    lag_seconds: float = 0.0


@dataclass(frozen=True)
class StoreGroup:
    members: list[Member] = field(default_factory=list)
    timeline: int = 1  # PostgreSQL's timeline: one more at each failover or switchover
    last_failover: datetime | None = None  # when the current timeline began, if known

    @property
    def copies(self) -> int:
        """Servers a commit is on when acknowledged: the leader and its streaming
        synchronous standbys."""
        return sum(1 for m in self.members if m.role == LEADER or
                   (m.role == SYNC_STANDBY and m.state == "streaming"))

    def as_rows(self) -> list[dict]:
        return [{"name": m.name, "role": m.role, "state": m.state, "lagBytes": m.lag_bytes,
                 "lagSeconds": round(m.lag_seconds, 3)} for m in self.members]


def single(name: str) -> StoreGroup:
    """A store on one server or file: one copy of everything."""
    return StoreGroup([Member(name, LEADER, "serving")])


def pg_group(conn: psycopg.Connection) -> StoreGroup:
    (primary, synchronous_commit, timeline, may_list_wal) = conn.execute(PRIMARY).fetchone()
    members = [Member(primary, LEADER, "serving")]
    for name, sync_state, state, lag, seconds in conn.execute(STANDBYS).fetchall():
        waited = sync_state in ("sync", "quorum") and synchronous_commit not in ("off", "local")
        members.append(Member(name or "?", SYNC_STANDBY if waited else REPLICA, state,
                              int(lag), float(seconds)))
    streaming = {m.name for m in members}
    members += [Member(slot, REPLICA, "down", int(lag))
                for slot, lag in conn.execute(ABSENT).fetchall() if slot not in streaming]
    last_failover = None
    if may_list_wal:  # superuser or pg_monitor; else the time stays unknown
        row = conn.execute(PROMOTED).fetchone()
        if row is not None:
            timeline, last_failover = max(timeline, int(row[0][:8], 16)), row[1]
    return StoreGroup(members, int(timeline), last_failover)
