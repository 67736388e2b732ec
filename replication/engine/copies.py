"""A message store's servers as its caller sees them: the members of its replicated group
(PostgreSQL's primary and standbys, as the primary's pg_stat_replication lists them), their
roles and lag, and how many copies a commit is on before it is acknowledged."""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

# On the primary: each standby, whether the primary waits for it at commit, and how far its
# replay is behind the primary's WAL (bytes).
STANDBYS = """
SELECT application_name, sync_state, state,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint
FROM pg_stat_replication ORDER BY application_name
"""
PRIMARY = "SELECT coalesce(host(inet_server_addr()), 'local') || ':' || " \
          "coalesce(inet_server_port(), 0), current_setting('synchronous_commit')"


@dataclass(frozen=True)
class Member:
    name: str
    role: str  # primary, sync_standby, async_standby
    state: str  # streaming, catchup, ... (pg_stat_replication's), or serving for the primary
    lag_bytes: int = 0


@dataclass(frozen=True)
class StoreGroup:
    members: list[Member] = field(default_factory=list)

    @property
    def copies(self) -> int:
        """Servers a commit is on when acknowledged: the primary and its streaming
        synchronous standbys."""
        return sum(1 for m in self.members if m.role == "primary" or
                   (m.role == "sync_standby" and m.state == "streaming"))

    def as_rows(self) -> list[dict]:
        return [{"name": m.name, "role": m.role, "state": m.state, "lagBytes": m.lag_bytes}
                for m in self.members]


def single(name: str) -> StoreGroup:
    """A store on one server or file: one copy of everything."""
    return StoreGroup([Member(name, "primary", "serving")])


def pg_group(conn: psycopg.Connection) -> StoreGroup:
    (primary, synchronous_commit) = conn.execute(PRIMARY).fetchone()
    members = [Member(primary, "primary", "serving")]
    for name, sync_state, state, lag in conn.execute(STANDBYS).fetchall():
        waited = sync_state in ("sync", "quorum") and synchronous_commit not in ("off", "local")
        members.append(Member(name or "?", "sync_standby" if waited else "async_standby",
                              state, int(lag)))
    return StoreGroup(members)
