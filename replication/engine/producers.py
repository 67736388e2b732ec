"""An idempotent producer's batch and the state a store keeps of it: plain data, imported by the
store interface and by the sequence rule (sequences.py) alike, so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

SEQ_MOD = 1 << 31  # Kafka's sequence numbers are int32 and wrap to 0 after 2**31 - 1


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """An idempotent producer's batch for one partition: Kafka's producer id, epoch and the
    batch's sequence range. The store writes it once, however often it is retried."""

    producer_id: int
    epoch: int
    first_seq: int
    count: int

    @property
    def last_seq(self) -> int:
        return (self.first_seq + self.count - 1) % SEQ_MOD


@dataclass(frozen=True, slots=True)
class ProducerState:
    """What the store keeps per (partition, producer id): the epoch and the last few batches'
    sequence ranges with the offset each began at, newest last."""

    epoch: int
    firsts: tuple[int, ...]
    lasts: tuple[int, ...]
    offsets: tuple[int, ...]
