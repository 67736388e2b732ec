"""broker/server.py's process-wide settings."""

from __future__ import annotations

import sys

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
