"""Kafka's DescribeProducers: the idempotent producers a partition has seen, as its store keeps
them for the sequence rule (replication/engine/sequences.py). Transactions are not supported,
so no producer has a transaction open; producers are kept for as long as the partition is."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from replication.engine.producers import SEQ_MOD, ProducerState
from replication.errors import NoSuchPartition
from replication.models import Stream
from replication.services.cursors import _timestamp
from replication.services.messages import _on_store
from replication.services.topics import topic_of
from replication.stores import store_for


@dataclass(frozen=True)
class ProducerStanding:
    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp_ms: int  # of its last batch's last record; -1 once that is deleted


def _last_offset(state: ProducerState) -> int:
    return state.offsets[-1] + (state.lasts[-1] - state.firsts[-1]) % SEQ_MOD


def partition_producers(*, actor: AbstractBaseUser, stream: Stream, topic: str,
                        partition: int) -> list[ProducerStanding]:
    """The producers that wrote to the partition, by producer id. Reading producers' state
    is reading the partition, so consumeperm (Kafka asks READ on the topic)."""
    stream.require(actor, "consumeperm", action="describe the topic's producers")
    target = topic_of(stream, topic)
    if not 0 <= partition < target.partitions:
        raise NoSuchPartition(f"partition {partition} does not exist: {target} has partitions "
                              f"0 to {target.partitions - 1}", field="partition")
    store = store_for(stream.cluster)
    states = _on_store(target, lambda: store.producer_states(stream.uuid, target.name,
                                                             partition))
    return [ProducerStanding(pid, state.epoch, state.lasts[-1],
                             _timestamp(store, stream, target.name, partition,
                                        _last_offset(state)) or -1)
            for pid, state in sorted(states.items())]
