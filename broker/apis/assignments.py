"""Manual replica assignments (CreateTopics' and CreatePartitions'), checked as Kafka 3.x's
controller checks them, then mapped onto how partitions are placed here: a stream's store keeps
each message once per cluster, so a partition has one replica, its leader, and the leader is
Metadata's rendezvous hash over the live listeners (broker/apis/metadata.py). An assignment is
accepted only when it names exactly that placement (on a cluster one listener serves: that
listener's node id, for every partition); any other is refused with Kafka's error and the
reason, never accepted and ignored (invariant 8)."""

from __future__ import annotations

from collections.abc import Sequence

from broker import errors
from broker.apis.metadata import leader_of
from broker.errors import KafkaError
from broker.session import Node

INVALID_REPLICA_ASSIGNMENT = errors.ErrorCode.invalid_replica_assignment


def _refuse(message: str) -> KafkaError:
    return KafkaError(INVALID_REPLICA_ASSIGNMENT, message)


def _check_lists(assigned: Sequence[Sequence[int]], nodes: list[Node]) -> None:
    """Kafka's checks of each replica list: not empty, no broker twice, every broker known, and
    as many replicas in each."""
    known = {node.node_id for node in nodes}
    for replicas in assigned:
        if not replicas:
            raise _refuse("the manual partition assignment includes an empty replica list")
        twice = sorted({b for b in replicas if list(replicas).count(b) > 1})
        if twice:
            raise _refuse(f"the manual partition assignment includes the broker {twice[0]} "
                          "more than once")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise _refuse(f"the manual partition assignment includes broker {unknown[0]}, but no "
                          f"such broker is registered: the live brokers are "
                          f"{', '.join(str(n) for n in sorted(known))}")
    if len({len(replicas) for replicas in assigned}) > 1:
        raise _refuse("all partitions in the manual partition assignment must have the same "
                      "number of replicas")


def _check_placement(key: str, first: int, assigned: Sequence[Sequence[int]],
                     nodes: list[Node]) -> None:
    """One replica a partition (a store keeps a message once per cluster), and it is the
    partition's leader among the live listeners."""
    if len(assigned[0]) != 1:
        raise KafkaError(errors.INVALID_REPLICATION_FACTOR,
                         f"{len(assigned[0])} replicas a partition: a stream's store keeps each "
                         "message once per cluster, so each partition has 1; replicate streams "
                         "to other clusters instead")
    for index, [broker] in enumerate(assigned, start=first):
        leader = leader_of(key, index, nodes)
        if broker != leader:
            raise _refuse(f"partition {index} on broker {broker}: partitions are spread over "
                          "the live listeners by a hash of the topic and partition, and this "
                          f"one is led by broker {leader}; name it, or leave assignments out")


def check_new_topic(key: str, spec: object, nodes: list[Node]) -> int | None:
    """The partition count CreateTopics' `spec` asks for through its assignments (None when it
    gives none), or KafkaError with Kafka's code for an assignment that cannot be."""
    given = list(getattr(spec, "assignments", None) or ())
    if not given:
        return None
    if getattr(spec, "num_partitions", -1) != -1 or getattr(spec, "replication_factor", -1) != -1:
        raise KafkaError(errors.INVALID_REQUEST,
                         "a manual partition assignment was given with num_partitions or "
                         "replication_factor set: give -1 for both, or leave assignments out")
    given.sort(key=lambda a: a.partition_index)
    if [a.partition_index for a in given] != list(range(len(given))):
        raise _refuse("the partitions of a manual partition assignment must be a consecutive "
                      "0-based sequence")
    assigned = [list(a.broker_ids) for a in given]
    _check_lists(assigned, nodes)
    _check_placement(key, 0, assigned, nodes)
    return len(assigned)


def check_new_partitions(key: str, current: int, count: int, assignments: object,
                         nodes: list[Node]) -> None:
    """CreatePartitions' assignments for the partitions from `current` up to `count`."""
    if assignments is None:
        return
    assigned = [list(a.broker_ids) for a in assignments]  # type: ignore[attr-defined]
    if len(assigned) != count - current:
        raise _refuse(f"attempted to add {count - current} additional partition(s), but "
                      f"{len(assigned)} assignment(s) were given")
    if not assigned:
        return
    _check_lists(assigned, nodes)
    if len(assigned[0]) != 1:
        raise _refuse(f"the manual partition assignment includes a partition with "
                      f"{len(assigned[0])} replica(s), but this is not consistent with previous "
                      "partitions, which have 1 replica(s)")
    _check_placement(key, current, assigned, nodes)
