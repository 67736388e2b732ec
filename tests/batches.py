"""A batch store's rows (issue 30) seen and changed behind the store's back, as a disk or a
bug would: for the tests of what reads and compares them."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg

from replication.engine.recordbatch import frames
from replication.engine.stored import batch_of, records_of

PID = "SELECT id FROM partitions WHERE stream = %s AND topic = %s AND partition = %s"


def holds_batches(url: str) -> bool:
    if not url.startswith(("postgres://", "postgresql://")):
        return False
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass('batches') IS NOT NULL").fetchone()[0]


def rewrite_record(url: str, where: tuple[uuid.UUID, str, int, int],
                   change: Callable[[bytes | None], bytes | None]) -> None:
    """The batch holding `where` (stream, topic, partition, offset) decoded, that record's
    value changed, and the batch encoded again (a new CRC) in place of the old."""
    stream, topic, partition, offset = where
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.execute(PID, (stream, topic, partition)).fetchone()[0]
        last, data, origin, producer = conn.cursor(binary=True).execute(
            "SELECT last_offset, data, uuid_send(origin), producer FROM batches WHERE pid = %s "
            "AND last_offset >= %s ORDER BY last_offset LIMIT 1", (pid, offset)).fetchone()
        base, records = records_of(bytes(data))
        records[offset - base].value = change(records[offset - base].value)
        batch = batch_of(records, base, 0, origin=bytes(origin), producer=producer)
        conn.execute("UPDATE batches SET data = %s, crc = %s, size = %s WHERE pid = %s AND "
                     "last_offset = %s", (batch.data, batch.crc, batch.size, pid, last))


def stored_batches(url: str, stream: uuid.UUID, topic: str, partition: int) -> list[tuple]:
    """The partition's batch rows, all but their partition id, in offset order."""
    with psycopg.connect(url) as conn:
        pid = conn.execute(PID, (stream, topic, partition)).fetchone()[0]
        return conn.execute(
            "SELECT base_offset, last_offset, records, crc, origin, producer, size, data "
            "FROM batches WHERE pid = %s ORDER BY last_offset", (pid,)).fetchall()


def split_batches(data: bytes) -> list[bytes]:
    """The record batches a fetch answered, each its own bytes."""
    return [whole[pos:end] for whole, pos, end, _ in frames(data)]
