"""Loopback ports for the servers a run starts itself: a free one, and waiting until a
process listens on it."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path


def ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A free port below the ephemeral range. Not one the kernel hands out: a server killed
    -9 and started again on its port may find it taken meanwhile by a client's outgoing
    connection, or by a client reconnecting to it, whose connection to a port nobody listens
    on can meet itself (TCP simultaneous open: source port = destination port)."""
    for _ in range(200):
        port = random.randrange(20000, ephemeral_low())
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


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
