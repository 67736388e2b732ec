"""The faults of a soak on the replicated group (`python -m bench.chaos --ha`: newyork's store
and every process's Redis on bench/hagroup's Patroni, etcd and Sentinel group on loopback):
the store's primary killed -9 with its data folder deleted, an etcd member killed -9, the Redis
master killed -9, and the primary (Patroni, its postmaster and every backend) stopped with
SIGSTOP past Patroni's leader lease, as a network partition cuts it off: the standby is
promoted meanwhile, and when the old primary wakes Patroni demotes it (with a strict
synchronous standby it could acknowledge nothing alone). Each is undone a moment later (the
member started again: a wiped one rejoins as a standby, copied from the new primary; SIGCONT).
One at a time, on a healthy group only: a second PostgreSQL fault before the first healed is
a double failure, which three members do not promise to survive."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from bench.chaos.topology import GATEWAYS, RESTARTED
from bench.hagroup import HaGroup
from bench.hagroup.configs import MEMBERS, REDIS_SERVERS, TTL

if TYPE_CHECKING:
    from bench.chaos.faults import Driver

PRIMARY_KILLED = "store primary kill -9 + disk"
ETCD_KILLED = "etcd member kill -9"
REDIS_MASTER_KILLED = "Redis master kill -9"
PARTITIONED = "primary SIGSTOP past the lease"
HA_KINDS = (PRIMARY_KILLED, ETCD_KILLED, REDIS_MASTER_KILLED, PARTITIONED)


class GroupStore:
    """newyork's store on the group, as the soak's Store: its multi-host URL. The soak's
    "PostgreSQL restart" (the whole server) does not apply: HaFaults breaks one member."""

    def __init__(self, group: HaGroup) -> None:
        self.group = group

    def url(self, database: str) -> str:
        return self.group.url(database)

    def start(self) -> None:
        raise RuntimeError("the replicated group is never restarted whole (bench/chaos/hafaults)")

    stop = start  # type: ignore[assignment]


def member_pids(group: HaGroup, name: str) -> list[int]:
    """Patroni's pid, then its postmaster's and every child of the postmaster (the backends,
    the WAL sender and writer): what a partition cuts off together."""
    pids = [pid for pid in (group.pid(name), group.postmaster(name)) if pid]
    if len(pids) == 2:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(stat.read_text().rsplit(") ", 1)[1].split()[1]) == pids[1]:
                    pids.append(int(stat.parent.name))
    return pids


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


@dataclass
class HaFaults:
    group: HaGroup
    busy: bool = False  # a fault not yet undone, or the group not healthy again since
    stopped: list[int] = field(default_factory=list)  # SIGSTOPped pids, for restore
    lock: threading.Lock = field(default_factory=threading.Lock)
    said: str = ""  # the group's problems as last said

    @property
    def kinds(self) -> tuple[str, ...]:
        return HA_KINDS

    def actions(self, driver: Driver) -> dict[str, Callable[[], None]]:
        return {PRIMARY_KILLED: lambda: self.kill_primary(driver),
                ETCD_KILLED: lambda: self.kill_etcd(driver),
                REDIS_MASTER_KILLED: lambda: self.kill_redis_master(driver),
                PARTITIONED: lambda: self.partition_primary(driver)}

    def ready(self, driver: Driver) -> bool:
        """Nothing of ours pending and every member healthy (a rejoining member copied), and
        no failover cycle between its failover and failback (whose services need the store)."""
        if driver.topology.failed_over:
            return False
        if self.busy:
            problems = "; ".join(self.group.problems())
            if problems and problems != self.said:
                driver.say(f"no group fault while the group heals: {problems}")
            self.busy, self.said = bool(problems), problems
        return not self.busy

    def _begin(self, driver: Driver, kind: str, what: str, undo: Callable[[], None],
               delay: float, hit: set[str]) -> None:
        self.busy = True
        driver.hit = hit
        driver.faults[kind] += 1
        driver.say(what)
        driver.later(delay, undo, f"undo: {what}", kind)

    def kill_primary(self, driver: Driver) -> None:
        primary = self.group.primary() if self.ready(driver) else None
        if primary is None:
            return
        self.group.kill(primary, wipe=True)
        self._begin(driver, PRIMARY_KILLED, f"kill -9 {RESTARTED}'s store primary {primary} "
                    "and delete its data folder", lambda: self.group.start(primary),
                    driver.rng.uniform(2.0, 6.0), {RESTARTED})

    def kill_etcd(self, driver: Driver) -> None:
        if not self.ready(driver):
            return
        name = f"etcd{driver.rng.randrange(MEMBERS)}"
        self.group.kill(name)
        self._begin(driver, ETCD_KILLED, f"kill -9 {name}", lambda: self.group.start(name),
                    driver.rng.uniform(1.0, 4.0), set())

    def kill_redis_master(self, driver: Driver) -> None:
        master = self.group.redis_master() if self.ready(driver) else None
        names = [f"redis{i}" for i in range(REDIS_SERVERS)
                 if master and self.group.ports.redis(i) == master[1]]
        if not names:
            return
        self.group.kill(names[0])
        driver.down.add("Redis")  # the driver's own Redis reads wait for the new master

        def undo() -> None:
            self.group.start(names[0])
            self.wait_redis_master(master)
            driver.down.discard("Redis")

        self._begin(driver, REDIS_MASTER_KILLED, f"kill -9 the Redis master {names[0]}",
                    undo, driver.rng.uniform(2.0, 6.0), set(GATEWAYS))

    def wait_redis_master(self, old: tuple[str, int], timeout: float = 45.0) -> None:
        """Until the sentinels name another master and it answers (their failover takes a few
        seconds after SENTINEL_DOWN_MS)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            master = self.group.redis_master()
            if master and master != old:
                with contextlib.suppress(redis.RedisError), \
                        redis.Redis(port=master[1], socket_timeout=2) as client:
                    if client.ping():
                        return
            time.sleep(0.2)

    def partition_primary(self, driver: Driver) -> None:
        primary = self.group.primary() if self.ready(driver) else None
        if primary is None:
            return
        self.stopped = member_pids(self.group, primary)
        signal_all(self.stopped, signal.SIGSTOP)
        # On a timer of its own: the driver's thread may wait meanwhile on a connection to the
        # stopped server (as every client of a partitioned primary does) and would never undo.
        delay = TTL + driver.rng.uniform(2.0, 5.0)
        threading.Timer(delay, self.resume).start()
        self._begin(driver, PARTITIONED, f"SIGSTOP {RESTARTED}'s store primary {primary} "
                    f"({len(self.stopped)} processes) past the {TTL} s leader lease",
                    self.resume, delay, {RESTARTED})

    def resume(self) -> None:
        """Patroni first: on waking it finds its lease gone and demotes its server before the
        backends run on. Twice is harmless (the timer's, then the driver's undo)."""
        with self.lock:
            signal_all(self.stopped, signal.SIGCONT)
            self.stopped = []
