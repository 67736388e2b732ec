"""broker/server.py's process-wide settings."""

from __future__ import annotations

import sys

from broker import server
from broker.server import share_the_interpreter


def test_the_listener_process_switches_threads_every_millisecond(settings):
    """A megabyte produce decoded in the thread pool holds a small request back for at most the
    switch interval at each hand-over of the GIL (docs/benchmarks.md, quota isolation)."""
    before = sys.getswitchinterval()
    try:
        settings.KAFKA_SWITCH_INTERVAL_MS = 1.0
        share_the_interpreter()
        assert sys.getswitchinterval() == 0.001
        settings.KAFKA_SWITCH_INTERVAL_MS = 2.5
        share_the_interpreter()
        assert sys.getswitchinterval() == 0.0025
    finally:
        sys.setswitchinterval(before)


def test_the_listener_keeps_freed_request_buffers_below_its_trim_threshold(monkeypatch):
    """glibc's trim threshold stays at 128 KiB once the mmap threshold is fixed: every free of
    a produce's buffers gave the heap's top back and the next request faulted it in again
    (about a third of the listener's CPU per produced message)."""
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(server.ctypes, "CDLL", lambda name: Libc())
    server.return_large_buffers()
    assert calls == [(-3, 4 << 20), (-1, 8 << 20)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
