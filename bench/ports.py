"""Loopback ports for the servers a run starts itself: a free one, and waiting until a
process listens on it."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, timeout: float = 90.0) -> None:
    """Until something accepts connections on `port`; RuntimeError if `process` exits first
    or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port} (process exit status "
                                   f"{process.poll()})") from None
            time.sleep(0.05)
