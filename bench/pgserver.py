"""A PostgreSQL 15 server of a run's own (initdb + pg_ctl in a temporary folder, on a free
port), for the tests and benchmarks that crash and restart a server under the engine, need
settings the shared one lacks (wal_level=logical) or must keep their connections off it;
and the guard a long run takes before it fills the shared server.

Used by tests/workers/conftest.py (the `private_postgres` fixture), tests/workers/test_chaos.py,
bench/chaos/command.py, bench/replication.py and bench/peers.py.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """initdb + pg_ctl in a temporary folder on a free port, run as the postgres user (initdb
    refuses root). `settings` are the server's `-c name=value` options. `durable=False` gives
    up crash safety for speed (initdb --no-sync, fsync=off): for tests, whose data dies with
    them. stop() then start() restarts it on the same port and data, as the chaos driver does.

    `with PrivatePostgres(...) as server:` starts it and removes it on the way out."""

    def __init__(self, *, prefix: str = "sg-pg-", settings: Mapping[str, str] | None = None,
                 durable: bool = True) -> None:
        # Not under pytest's tmp_path: that is private to root, and the server runs as postgres.
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.folder / "data"
        self.durable = durable
        self.settings = {**({} if durable else {"fsync": "off"}), **(settings or {})}
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        fast = [] if self.durable else ["--no-sync"]
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  *fast)

    def start(self) -> None:
        options = " ".join([f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1",
                            *(f"-c {name}={value}" for name, value in self.settings.items())])
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.folder / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def launch(self) -> PrivatePostgres:
        """init and start; a failure removes what was made before it propagates."""
        try:
            self.init()
            self.start()
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Stop at once (nothing here is worth a clean shutdown) and delete the folder. Safe
        after a failed init or start, on a stopped server, and twice (atexit and finally)."""
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop("immediate")
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL a postmaster pg_ctl could not stop (one still starting, as when the chaos
        soak's watchdog removes the server while the driver restarts it); its backends follow
        it. Only a live postgres on this data folder: a stale pid file names another process."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            return
        if b"postgres" in command and str(self.data).encode() in command:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> PrivatePostgres:
        return self.launch()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()


class BusyServer(RuntimeError):
    """The shared server kept fewer free connections than a run needs; the message says so."""


def wait_for_free_connections(connection: Any, needed: int, timeout: float = 90.0) -> None:
    """Wait until the server behind `connection` (an open DB-API connection: Django's or
    psycopg's, counted among the used) has `needed` connections free. The shared server's
    max_connections is used by other suites and benchmarks too; a long run started without
    room fails later on `too many clients`, far from the cause. BusyServer after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), current_setting('max_connections')::int "
                           "FROM pg_stat_activity")
            used, limit = cursor.fetchone()
        if limit - used >= needed:
            return
        if time.monotonic() > deadline:
            raise BusyServer(f"the shared PostgreSQL has {limit - used} of {limit} connections "
                             f"free after {timeout:.0f} s; the run needs {needed}")
        time.sleep(2.0)
