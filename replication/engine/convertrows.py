"""Upgrade in place (issue 30): a row store's messages as record batches, for both
databases' converters (pgbatch/convert.py, sqliteconvert.py).

A partition's messages, in offset order, become batches of at most BATCH messages, each of one
origin and one producer (as every batch the store writes is). Offsets, timestamps, keys,
values (null kept apart from empty), headers and origins are kept."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby

from replication.engine.store import Record, decode_headers
from replication.engine.stored import StoredBatch, batch_of

BATCH = 1000


def batches_of_rows(rows: list[tuple]) -> Iterator[StoredBatch]:
    """Rows (offset, ts, key, value, headers, origin bytes, producer) in offset order: runs
    with one origin and producer, cut every BATCH rows, as batches."""
    for (origin, producer), run in groupby(rows, key=lambda r: (bytes(r[5]), r[6])):
        chunk: list[tuple] = []
        for row in run:
            chunk.append(row)
            if len(chunk) == BATCH:
                yield _batch(chunk, origin, producer)
                chunk = []
        if chunk:
            yield _batch(chunk, origin, producer)


def _batch(rows: list[tuple], origin: bytes, producer: str | None) -> StoredBatch:
    records = [Record(None if value is None else bytes(value),
                      None if key is None else bytes(key),
                      decode_headers(bytes(headers)) if headers else (), None, ts)
               for _, ts, key, value, headers, _, _ in rows]
    return batch_of(records, rows[0][0], rows[0][1], origin=origin, producer=producer)
