"""Produce's rule for compacted topics (issue 31), as Kafka's broker has it: every record of a
compacted topic needs a key (compaction keeps the latest record per key), so a batch holding
a keyless record is refused whole with INVALID_RECORD, and Produce v8+'s record_errors name
each keyless record by its index in its batch (KIP-467). Keys are looked at only on
compacted topics: other produces pay nothing."""

from __future__ import annotations

from collections.abc import Sequence

from replication.engine.compaction import null_keys

MESSAGE = ("a compacted topic needs a key on every record (compaction keeps the latest record "
           "per key): give each record a key, or produce to a topic of a stream that is not "
           "compacted")
RecordErrors = list[tuple[int, str]]  # (batch_index, batch_index_error_message)


def keyless_raw(batches: Sequence[bytes]) -> RecordErrors:
    """The keyless records of stored-as-sent batches (checked already), by batch index."""
    return [(i, f"record {i} of the batch has no key") for data in batches
            for i in null_keys(data)]


def keyless_decoded(keys: Sequence[Sequence[bytes | None]]) -> RecordErrors:
    """The keyless records of decoded batches (each batch's keys), by batch index."""
    return [(i, f"record {i} of the batch has no key") for batch in keys
            for i, key in enumerate(batch) if key is None]
