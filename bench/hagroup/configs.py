"""The configuration of each member of a replicated group on loopback (bench/hagroup): etcd's
command line, Patroni's YAML, redis-server's and redis-sentinel's files. Ports are offsets from
one base, so two groups (a developer's and a test run's) never share a port."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "streamgate"  # Patroni's cluster name in etcd
MASTER_NAME = "streamgate"  # the Redis master's name at the sentinels
MEMBERS = 3  # etcd members, PostgreSQL members and sentinels each
REDIS_SERVERS = 2
# Patroni's leader key lives `TTL` seconds without a refresh: the time a dead primary holds the
# group before a standby is promoted. loop_wait + 2 * retry_timeout must stay under it.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 8, 1, 3
# Sentinels call a master down after this long without an answer.
SENTINEL_DOWN_MS = 2000


@dataclass(frozen=True)
class Ports:
    """Every port of a group from its base: etcd clients base+0.., etcd peers base+3..,
    Patroni's REST API base+8.., PostgreSQL base+32.., Redis base+63.., sentinels base+66..
    (the default base, 25400, puts PostgreSQL on 25432-25434)."""

    base: int = 25400

    def etcd(self, i: int) -> int:
        return self.base + i

    def etcd_peer(self, i: int) -> int:
        return self.base + 3 + i

    def rest(self, i: int) -> int:
        return self.base + 8 + i

    def pg(self, i: int) -> int:
        return self.base + 32 + i

    def redis(self, i: int) -> int:
        return self.base + 63 + i

    def sentinel(self, i: int) -> int:
        return self.base + 66 + i


def etcd_command(ports: Ports, i: int, data: Path) -> list[str]:
    peers = ",".join(f"e{j}=http://127.0.0.1:{ports.etcd_peer(j)}" for j in range(MEMBERS))
    client, peer = f"http://127.0.0.1:{ports.etcd(i)}", f"http://127.0.0.1:{ports.etcd_peer(i)}"
    return ["etcd", "--name", f"e{i}", "--data-dir", str(data),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", peers, "--initial-cluster-state", "new",
            "--initial-cluster-token", f"streamgate-{ports.base}",
            "--heartbeat-interval", "200", "--election-timeout", "2000",
            "--log-level", "warn"]


def patroni_config(ports: Ports, i: int, folder: Path) -> str:
    """Member i's patroni.yml: synchronous_mode_strict, so a commit is acknowledged only once a
    standby holds it (Kafka's min.insync.replicas=2: with no standby, writes wait, never
    return on one copy); trust on loopback, as the machine's other test servers."""
    hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
           "host replication all 127.0.0.1/32 trust", "local replication all trust"]
    config = {
        "scope": SCOPE, "name": f"pg{i}",
        "restapi": {"listen": f"127.0.0.1:{ports.rest(i)}",
                    "connect_address": f"127.0.0.1:{ports.rest(i)}"},
        "etcd3": {"hosts": [f"127.0.0.1:{ports.etcd(j)}" for j in range(MEMBERS)]},
        "bootstrap": {
            "dcs": {"ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1 << 20,
                    "synchronous_mode": True, "synchronous_mode_strict": True,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": {
                        "max_connections": 200, "max_wal_senders": 10,
                        "max_replication_slots": 10, "wal_keep_size": "256MB",
                        "hot_standby": "on", "wal_log_hints": "on",
                        # A standby left by a dead primary retries its WAL source this often
                        # (5 s by default): in strict mode no commit returns until it streams
                        # from the promoted one, so this interval was most of a failover.
                        "wal_retrieve_retry_interval": "500ms"}}},
            "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "data-checksums"],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{ports.pg(i)}", "connect_address": f"127.0.0.1:{ports.pg(i)}",
            "data_dir": str(folder / "data"), "bin_dir": str(PG_BIN),
            "pgpass": str(folder / "pgpass"), "pg_hba": hba,
            "authentication": {"superuser": {"username": "postgres"},
                               "replication": {"username": "postgres"},
                               "rewind": {"username": "postgres"}},
            "parameters": {"unix_socket_directories": str(folder)},
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }
    return yaml.safe_dump(config, sort_keys=False)


def redis_config(ports: Ports, i: int, folder: Path) -> str:
    """Server 0 starts as the master, the others as its replicas; the sentinels move the role.
    An append-only file, so a restarted master does not come back empty and wipe its
    replicas."""
    lines = [f"port {ports.redis(i)}", "bind 127.0.0.1", f"dir {folder}",
             "appendonly yes", "appendfsync everysec", 'save ""', "maxclients 2000",
             "protected-mode no"]
    if i:
        lines.append(f"replicaof 127.0.0.1 {ports.redis(0)}")
    return "\n".join(lines) + "\n"


def sentinel_config(ports: Ports, i: int, folder: Path) -> str:
    """A quorum of two of the three sentinels calls the master down and elects one to fail
    over. The sentinel rewrites this file as it learns the group."""
    return "\n".join([
        f"port {ports.sentinel(i)}", "bind 127.0.0.1", f"dir {folder}", "protected-mode no",
        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {ports.redis(0)} 2",
        f"sentinel down-after-milliseconds {MASTER_NAME} {SENTINEL_DOWN_MS}",
        f"sentinel failover-timeout {MASTER_NAME} 10000",
        f"sentinel parallel-syncs {MASTER_NAME} 1",
    ]) + "\n"


def multihost(ports: Ports, database: str) -> str:
    """libpq's multi-host URL of the group: whichever member is the primary answers."""
    hosts = ",".join(f"127.0.0.1:{ports.pg(i)}" for i in range(MEMBERS))
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"


def sentinel_url(ports: Ports, db: int = 0) -> str:
    """The group's Redis as a sentinel URL (portal/settings.py's REDIS_URL accepts it)."""
    hosts = ",".join(f"127.0.0.1:{ports.sentinel(i)}" for i in range(MEMBERS))
    return f"sentinel://{hosts}/{MASTER_NAME}/{db}"
