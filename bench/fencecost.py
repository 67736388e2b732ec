"""The placement fence's cost on a store's writes (issue 33), the `fence` part of
`python -m bench groups`: what a cluster's store pays once the cluster has a second group,
measured in the engine, apart from the listener and the machine's other load.

Two stores on the local PostgreSQL (bench/partitionmove.py's sgbench_move_a and _b, made again
each run), a topic of 4 partitions in each; `a` has the fence (engine/fence.py: the `held`
column and the trigger every write's partitions-row update passes), its partitions held, as a
routed cluster's home group has them; `b` is a plain store. Appends of `--fence-records`
records of 100 B spread over the 4 partitions (one transaction each, as one produce request)
alternate between the two, `--fence-appends` each; the figures are each one's median append
and the ratio.
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.partitionmove import VALUE, stores
from replication.engine import fence
from replication.engine.store import Record
from replication.engine.storebase import MessageStore

PARTITIONS = 4


def _timed(store: MessageStore, stream: uuid.UUID, records: list[Record]) -> float:
    began = time.perf_counter()
    store.append(stream, "t", records, origin=stream)
    return (time.perf_counter() - began) * 1000


def fence_cost(appends: int, count: int) -> list[str]:
    fenced, plain = stores()
    stream = uuid.uuid4()
    for store in (fenced, plain):
        store.ensure_topic(stream, "t", PARTITIONS)
    fence.install(fenced)
    fence.set_held(fenced, stream, "t", range(PARTITIONS))
    records = [Record(VALUE, partition=i % PARTITIONS) for i in range(count)]
    times: dict[str, list[float]] = {"fenced": [], "plain": []}
    try:
        for n in range(appends):
            pair = (("fenced", fenced), ("plain", plain))
            for name, store in pair if n % 2 == 0 else pair[::-1]:
                times[name].append(_timed(store, stream, records))
    finally:
        fenced.close()
        plain.close()
    med = {k: statistics.median(v[appends // 10:]) for k, v in times.items()}  # warm only
    return [f"{appends:,} appends of {count:,} records of {len(VALUE)} B over {PARTITIONS} "
            "partitions each (one transaction), alternated, the first tenth left out: median "
            f"append {med['plain']:.2f} ms on the plain store, {med['fenced']:.2f} ms with the "
            f"fence: {med['fenced'] / med['plain']:.3f}x"]
