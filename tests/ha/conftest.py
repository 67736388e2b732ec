"""A replicated group of the run's own (bench/hagroup: etcd, PostgreSQL under Patroni, Redis
under Sentinel, on loopback), for the failover proofs. `make test-ha` runs them; `make test`
leaves them out (each kills and rebuilds servers: minutes, not seconds)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.hagroup import HaGroup

# The Kafka listener processes and SASL credentials of the broker tests.
from tests.broker.conftest import kafka, kafka_listeners  # noqa: F401

# Ports base+0..base+68; another group (`make ha-up`'s, 25400) may run beside it.
BASE = int(os.environ.get("STREAMGATE_HA_TEST_BASE", "26400"))


@pytest.fixture(scope="session")
def ha_group() -> Iterator[HaGroup]:
    # Not under pytest's tmp_path, private to root: the PostgreSQL members run as postgres.
    root = Path(tempfile.mkdtemp(prefix="sg-ha-"))
    root.chmod(0o755)
    group = HaGroup(root, BASE)
    try:
        group.up()
        yield group
    finally:
        group.remove()
