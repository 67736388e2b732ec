"""Child processes the benchmarks and tests start: ended the same way everywhere."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, *, kill: bool = False, timeout: float = 15) -> None:
    """End a child: SIGTERM (SIGKILL with kill=True), then SIGKILL if it is still running
    after `timeout` seconds; reaped either way, so no zombie is left behind."""
    process.kill() if kill else process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
