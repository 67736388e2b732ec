"""Token buckets of throttled links (workers/replication/throttle.py), on a clock of the test's
own."""

from __future__ import annotations

import uuid

import pytest

from replication.engine.replicator import BatchSpec
from workers.replication.throttle import Throttle

S, R = uuid.uuid4(), uuid.uuid4()


def spec(start: int, end: int, per_message: int = 100) -> BatchSpec:
    return BatchSpec(S, R, "clicks", 0, start, end, size=(end - start) * per_message)


def test_a_batch_is_cut_to_the_tokens_and_the_rest_waits_for_the_refill():
    throttle = Throttle.full(0.0, messages_per_s=500, bytes_per_s=1 << 30)
    first = throttle.grant(spec(0, 3000), 0.0)
    assert (first.start, first.end, first.size) == (0, 500, 50_000)  # the one-second burst
    assert throttle.grant(spec(500, 3000), 0.0) is None
    assert throttle.wait(spec(500, 3000)) == pytest.approx(0.1)  # a tenth of a second's worth
    later = throttle.grant(spec(500, 3000), 0.1)
    assert (later.start, later.end) == (500, 550)


def test_the_byte_rate_bounds_batches_too():
    throttle = Throttle.full(0.0, messages_per_s=10_000, bytes_per_s=10_000)
    granted = throttle.grant(spec(0, 1000, per_message=1000), 0.0)
    assert granted.end - granted.start == 10
    assert throttle.wait(spec(10, 1000, per_message=1000)) == pytest.approx(0.1)


def test_a_message_bigger_than_a_seconds_bytes_still_goes_alone():
    throttle = Throttle.full(0.0, messages_per_s=100, bytes_per_s=1000)
    granted = throttle.grant(spec(0, 5, per_message=5000), 0.0)
    assert granted.end - granted.start == 1
    assert throttle.grant(spec(1, 5, per_message=5000), 1.0) is None  # the debt is paid first
    assert throttle.grant(spec(1, 5, per_message=5000), 5.0).end == 2


def test_a_short_backlog_goes_whole():
    throttle = Throttle.full(0.0, messages_per_s=500, bytes_per_s=1 << 30)
    throttle.grant(spec(0, 480), 0.0)
    assert throttle.grant(spec(480, 490), 0.0).end == 490  # under a tenth of a second's worth
    assert throttle.grant(spec(490, 600), 0.0) is None  # 10 tokens left: wait for 50
