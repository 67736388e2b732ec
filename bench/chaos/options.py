"""What a soak run is asked to do (`python -m bench.chaos` turns its flags into these): every
part of the soak reads them, so they sit below all of it."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.chaos.watchdog import Watchdog


@dataclass
class Options:
    seconds: float = 60.0  # of faults
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))
    batch: int = 100  # records per produce call
    interval: float = 0.05  # between a producer's calls: at most 2,000 messages/s each
    fault_every: tuple[float, float] = (1.0, 3.0)  # seconds between two faults
    restart_every: float = 12.0  # at least this long between two PostgreSQL restarts
    spark: bool = True  # Spark catch-ups too, when workers.spark is built
    spark_every: float = 30.0  # at least this long between two (a JVM starts for each)
    portal: bool = True  # a producer through a portal process, killed -9 under it
    kafka: bool = True  # an idempotent Kafka producer through a listener, killed -9 under it
    kafka_timeout: float = 60.0  # its message.timeout.ms, in seconds
    cli: bool = True  # a producer through the command line (with the portal only)
    cli_interval: float = 0.5  # between its calls: each starts a Python process
    failover: bool = True  # failover/failback cycles of newyork from sanfrancisco
    failover_every: float = 40.0  # at least this long from a failback to the next failover
    converge_timeout: float = 120.0
    moves: bool = True  # partition moves between each cluster's two store groups (moves.py)
    say: Callable[[str], None] = print
    # Deadlines for every step (bench/chaos/watchdog.py); run_soak starts one if not given.
    watchdog: Watchdog | None = None
