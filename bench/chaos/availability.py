"""What faults cost the producers (issue 26): per interface, the share of the messages sent that
were acknowledged and the longest stretch with no acknowledgement, against the goals (a share
of at least 0.7, no stretch longer than the longest fault window plus 10 s). A fault window is
one fault's time from its injection to its undo having run (the process or server started
again, the link resumed, the failover or failback call returned)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.chaos.producers import Producer

SHARE_GOAL = 0.7
STRETCH_SLACK = 10.0  # seconds beyond the longest fault window


@dataclass(frozen=True)
class Window:
    kind: str
    start: float  # time.monotonic()
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Availability:
    interface: str
    attempts: int  # messages sent
    acknowledged: int
    stretch: float  # the longest time with no acknowledgement, seconds
    stretch_from: float  # when it began, seconds after the faults began

    @property
    def share(self) -> float:
        return self.acknowledged / self.attempts if self.attempts else 0.0

    def misses(self, window: Window | None) -> list[str]:
        allowed = (window.seconds if window else 0.0) + STRETCH_SLACK
        return ([f"share < {SHARE_GOAL:g}"] if self.share < SHARE_GOAL else []) + (
            [f"stretch > {allowed:.1f} s"] if self.stretch > allowed else [])


def longest_stretch(times: Iterable[float], began: float, ended: float) -> tuple[float, float]:
    """(length, start) of the longest time in [began, ended] with no acknowledgement; an
    acknowledgement after `ended` (a Kafka producer's flush) closes the last stretch."""
    points = sorted(times)
    points = [began, *points, max(ended, points[-1] if points else ended)]
    return max(((b - a, a) for a, b in pairwise(points)), default=(0.0, began))


def measure(producers: Iterable[Producer], zero: float) -> list[Availability]:
    """A row per producer (each writes through one interface); `zero` is when faults began."""
    rows = []
    for producer in producers:
        stretch, start = longest_stretch(producer.acked_at, producer.began, producer.ended)
        rows.append(Availability(producer.interface, producer.sent, len(producer.acks), stretch,
                                 start - zero))
    return rows


def longest_window(windows: Iterable[Window]) -> Window | None:
    return max(windows, key=lambda w: w.seconds, default=None)


def table(rows: list[Availability], window: Window | None, zero: float) -> str:
    lines = ["| interface | attempts (messages) | acknowledged | share | longest stretch with "
             "none | it began at | goal |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        misses = row.misses(window)
        lines.append(f"| {row.interface} | {row.attempts:,} | {row.acknowledged:,} | "
                     f"{row.share:.2f} | {row.stretch:.1f} s | {row.stretch_from:.1f} s | "
                     f"{'MISSED: ' + ', '.join(misses) if misses else 'met'} |")
    where = (f"{window.kind}, {window.seconds:.1f} s from {window.start - zero:.1f} s"
             if window else "none")
    return "\n".join([*lines, "", f"longest fault window: {where} (times after the faults "
                      "began)"])


def verdict(rows: list[Availability], window: Window | None) -> tuple[bool, str]:
    allowed = (window.seconds if window else 0.0) + STRETCH_SLACK
    missed = [f"{row.interface} ({', '.join(row.misses(window))})" for row in rows
              if row.misses(window)]
    goal = (f"share >= {SHARE_GOAL:g} and no stretch without an acknowledgement over "
            f"{allowed:.1f} s (longest fault window + {STRETCH_SLACK:g} s), per interface")
    if missed:
        return False, f"AVAILABILITY: MISSED by {'; '.join(missed)}; goal: {goal}"
    return True, f"AVAILABILITY: met; goal: {goal}"
