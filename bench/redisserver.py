"""A redis-server of a run's own on a free port, without persistence, which the chaos soak kills
and starts again (everything it held is lost, as when a real Redis restarts without a dump).
The shared 127.0.0.1:6379 is never restarted: other sessions' tests use it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from bench.ports import free_port, wait_listening


class PrivateRedis:
    """`with PrivateRedis() as server:` starts it and stops it on the way out; stop() then
    start() restarts it on the same port, empty."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="sg-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        # No RDB, no AOF: a restart starts empty; no protected mode questions on loopback.
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder), "--maxclients", "2000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.process, timeout)

    def stop(self, mode: str = "kill") -> None:
        """kill -9 (the default: a crash) or a plain SIGTERM; the data is gone either way."""
        if self.process is None:
            return
        self.process.kill() if mode == "kill" else self.process.terminate()
        self.process.wait(timeout=30)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()
