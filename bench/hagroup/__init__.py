"""A replicated group on loopback for development and tests: three etcd members, three
PostgreSQL members under Patroni (one synchronous standby), two Redis servers (a master and its
replica) and three Redis sentinels, each a process of its own with a pid file under `root`
(`python -m bench.hagroup up|down|status`, `make ha-up`). Real engines from Debian's packages
(patroni, etcd-server, redis-sentinel): nothing here decides a failover.

PostgreSQL refuses to run as root, so Patroni and its servers run as the postgres user."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import redis

from bench.hagroup import configs
from bench.hagroup.configs import MASTER_NAME, MEMBERS, REDIS_SERVERS, Ports


class GroupError(RuntimeError):
    """The group did not come up, or a member did not do what was asked in time."""


class HaGroup:
    def __init__(self, root: Path, base: int = 25400) -> None:
        self.root = Path(root)
        self.ports = Ports(base)

    # -- processes -------------------------------------------------------------------------
    def _pidfile(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        """The pid of member `name` (etcd0, pg1, redis0, sentinel2, ...) if it runs."""
        try:
            pid = int(self._pidfile(name).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        with contextlib.suppress(OSError):  # a zombie of ours counts as dead
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                os.waitpid(pid, os.WNOHANG)
                return None
        return pid

    def _spawn(self, name: str, command: list[str], *, postgres: bool = False) -> None:
        if self.pid(name):
            return
        log = (self.root / "log" / f"{name}.log").open("ab")
        user = {"user": "postgres", "group": "postgres", "extra_groups": []} \
            if postgres and os.geteuid() == 0 else {}
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   cwd=self.root, **user)
        self._pidfile(name).write_text(str(process.pid))

    def _folder(self, name: str, *, postgres: bool = False) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        if postgres and os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            folder.chmod(0o700)
        return folder

    # -- members ---------------------------------------------------------------------------
    def start_etcd(self, i: int) -> None:
        self._spawn(f"etcd{i}", configs.etcd_command(self.ports, i, self._folder(f"etcd{i}")))

    def start_pg(self, i: int) -> None:
        """Patroni for member i: a fresh or wiped data folder is made a standby of the
        primary (pg_basebackup), or the first member bootstraps the group."""
        folder = self._folder(f"pg{i}", postgres=True)
        config = folder / "patroni.yml"
        config.write_text(configs.patroni_config(self.ports, i, folder))
        if os.geteuid() == 0:
            shutil.chown(config, "postgres", "postgres")
        self._spawn(f"pg{i}", ["patroni", str(config)], postgres=True)

    def start_redis(self, i: int) -> None:
        folder = self._folder(f"redis{i}")
        config = folder / "redis.conf"
        if not config.exists():  # the sentinels rewrite its replicaof line: keep theirs
            config.write_text(configs.redis_config(self.ports, i, folder))
        self._spawn(f"redis{i}", ["redis-server", str(config)])

    def start_sentinel(self, i: int) -> None:
        folder = self._folder(f"sentinel{i}")
        config = folder / "sentinel.conf"
        if not config.exists():
            config.write_text(configs.sentinel_config(self.ports, i, folder))
        self._spawn(f"sentinel{i}", ["redis-sentinel", str(config)])

    def names(self) -> list[str]:
        return ([f"etcd{i}" for i in range(MEMBERS)] + [f"pg{i}" for i in range(MEMBERS)]
                + [f"redis{i}" for i in range(REDIS_SERVERS)]
                + [f"sentinel{i}" for i in range(MEMBERS)])

    def start(self, name: str) -> None:
        kind, i = name.rstrip("0123456789"), int(name[len(name.rstrip("0123456789")):])
        getattr(self, f"start_{kind}")(i)

    def up(self, timeout: float = 180.0) -> None:
        """Start whatever is not running (idempotent) and wait until the group is healthy."""
        for sub in ("run", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.names():
            self.start(name)
        self.wait_healthy(timeout)

    def kill(self, name: str, *, wipe: bool = False) -> None:
        """kill -9 member `name` as a machine dies: Patroni and its PostgreSQL server together
        (the postmaster is no child of Patroni's). `wipe`: its disk is lost too."""
        postmaster = self.postmaster(name) if name.startswith("pg") else None
        for pid in (self.pid(name), postmaster):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
        if postmaster:
            _wait_gone(postmaster)
        self._pidfile(name).unlink(missing_ok=True)
        if wipe:
            target = self.root / name / "data" if name.startswith("pg") else self.root / name
            shutil.rmtree(target, ignore_errors=True)

    def postmaster(self, name: str) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.root / name / "data" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            return pid
        return None

    def down(self) -> None:
        """Stop every member: Patroni first with SIGTERM (it stops its server), then the rest."""
        for name in [n for n in self.names() if n.startswith("pg")] + \
                [n for n in self.names() if not n.startswith("pg")]:
            pid = self.pid(name)
            if pid:
                os.kill(pid, signal.SIGTERM)
                if not _wait_gone(pid, 60):
                    self.kill(name)
            self._pidfile(name).unlink(missing_ok=True)

    def remove(self) -> None:
        self.down()
        for name in self.names():
            if name.startswith("pg"):
                with contextlib.suppress(OSError):
                    if pm := self.postmaster(name):
                        os.kill(pm, signal.SIGKILL)
                        _wait_gone(pm)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- state -----------------------------------------------------------------------------
    def patroni(self) -> dict:
        """Patroni's view of the PostgreSQL group (GET /cluster from any live member)."""
        for i in range(MEMBERS):
            with contextlib.suppress(OSError, ValueError):
                url = f"http://127.0.0.1:{self.ports.rest(i)}/cluster"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    return json.load(answer)
        return {"members": []}

    def primary(self) -> str | None:
        roles = {m["name"]: m["role"] for m in self.patroni()["members"]}
        return next((n for n, r in roles.items() if r == "leader"), None)

    def redis_master(self) -> tuple[str, int] | None:
        for i in range(MEMBERS):
            with contextlib.suppress(redis.RedisError):
                client = redis.Redis(port=self.ports.sentinel(i), socket_timeout=2)
                with client:
                    found = client.sentinel_get_master_addr_by_name(MASTER_NAME)
                if found:
                    host = found[0].decode() if isinstance(found[0], bytes) else found[0]
                    return host, int(found[1])
        return None

    def problems(self) -> list[str]:
        """What keeps the group from being healthy: [] once a primary, a synchronous standby
        and every member stream, and the sentinels agree on a master with a replica."""
        found = [f"{n} is not running" for n in self.names() if not self.pid(n)]
        members = self.patroni()["members"]
        roles = sorted(m["role"] for m in members)
        if roles != ["leader", "replica", "sync_standby"]:
            found.append(f"PostgreSQL roles are {roles or 'unknown'}")
        found += [f"{m['name']} is {m['state']}" for m in members
                  if m["state"] not in ("running", "streaming")]
        master = self.redis_master()
        if master is None:
            found.append("no sentinel names a Redis master")
        elif _replicas(master[1]) < REDIS_SERVERS - 1:
            found.append("the Redis master has no replica online")
        return found

    def wait_healthy(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while problems := self.problems():
            if time.monotonic() > deadline:
                raise GroupError(f"the group is not healthy after {timeout:g}s: "
                                 f"{'; '.join(problems)} (logs: {self.root / 'log'})")
            time.sleep(0.5)

    def url(self, database: str) -> str:
        return configs.multihost(self.ports, database)

    def redis_url(self, db: int = 0) -> str:
        return configs.sentinel_url(self.ports, db)


def _replicas(port: int) -> int:
    with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=2) as c:
        info = c.info("replication")
        return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                   and v.get("state") == "online")
    return 0


def _wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
