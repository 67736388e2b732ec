"""Idempotent producers on the message store: Kafka's producer id, epoch and sequence rule.

Plain Python (no Django); both stores apply it under the partition's lock, in the append's
transaction, so a retried batch is written once whatever crashes in between (invariant 10).
"""

from __future__ import annotations

from collections.abc import Sequence

from replication.engine.producers import SEQ_MOD, ProducerBatch, ProducerState
from replication.engine.store import PartitionOutOfRange, Record, StoreError

KEPT_BATCHES = 5  # as Kafka: a producer has at most 5 batches in flight per partition


class SequenceError(StoreError):
    """A batch the producer's state refuses: `fenced` (an older epoch than the partition has
    seen: Kafka's INVALID_PRODUCER_EPOCH) or a gap (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    def __init__(self, message: str, *, fenced: bool = False) -> None:
        super().__init__(message)
        self.fenced = fenced

    @property
    def kafka_error(self) -> str:
        """Its Kafka error code's name, as domain errors declare theirs."""
        return "invalid_producer_epoch" if self.fenced else "out_of_order_sequence_number"


class SequencesApart(StoreError):
    """An idempotent producer's batches of several partitions, offered together, of which one
    is not simply the next (a retry, or a batch its state refuses): nothing was written, and
    the caller appends them one by one, each answered as Kafka answers it."""


def sequence_check(state: ProducerState | None, batch: ProducerBatch) -> int | None:
    """Kafka's rule, under the partition's lock: the first offset of a retried batch (written
    already: acknowledge it again, write nothing), None for the next batch, SequenceError
    otherwise. A new producer or a new epoch starts at sequence 0."""
    pid = batch.producer_id
    if state is None or batch.epoch > state.epoch:
        if batch.first_seq != 0:
            raise SequenceError(f"producer {pid} epoch {batch.epoch}: the first batch must "
                                f"have sequence 0, not {batch.first_seq}")
        return None
    if batch.epoch < state.epoch:
        raise SequenceError(f"producer {pid} epoch {batch.epoch} is fenced by epoch "
                            f"{state.epoch}", fenced=True)
    for first, last, offset in zip(state.firsts, state.lasts, state.offsets, strict=True):
        if first == batch.first_seq and last == batch.last_seq:
            return offset
    expected = (state.lasts[-1] + 1) % SEQ_MOD
    if batch.first_seq != expected:
        raise SequenceError(f"producer {pid} epoch {batch.epoch}: sequence {batch.first_seq} "
                            f"does not follow {state.lasts[-1]}; expected {expected}")
    return None


def sequence_is_next(state: ProducerState | None, batch: ProducerBatch) -> bool:
    """Whether `batch` is simply the producer's next in the partition (not a retry, not
    refused)."""
    try:
        return sequence_check(state, batch) is None
    except SequenceError:
        return False


def sequence_next(state: ProducerState | None, batch: ProducerBatch, offset: int) -> ProducerState:
    """The state once `batch` is written at `offset`."""
    if state is None or batch.epoch != state.epoch:
        return ProducerState(batch.epoch, (batch.first_seq,), (batch.last_seq,), (offset,))
    k = KEPT_BATCHES - 1
    return ProducerState(batch.epoch, (*state.firsts[-k:], batch.first_seq),
                         (*state.lasts[-k:], batch.last_seq), (*state.offsets[-k:], offset))


def sequenced_partition(records: Sequence[Record], partitions: int) -> int:
    """An idempotent batch goes to one named partition."""
    p = records[0].partition
    if p is None or any(r.partition != p for r in records):
        raise StoreError("an idempotent producer's batch must name one partition for all records")
    if not 0 <= p < partitions:
        raise PartitionOutOfRange(
            f"partition {p} does not exist: the topic has partitions 0..{partitions - 1}")
    return p
