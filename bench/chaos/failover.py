"""The soak's failover/failback cycle (issue 16): newyork takes over sanfrancisco's topics with
a forced failover while producers write (sanfrancisco's messages not yet replicated are its
divergent tail), the producers of those topics move to newyork, and a failback later brings
sanfrancisco back as their origin, keeping its divergent tail aside in `<topic>.diverged`.

What "acknowledged" means then: a message acknowledged by sanfrancisco at or past the common
prefix the failback found is expected once in the divergence topic (by its id); every other
acknowledged message at its offset in the final primary, those acknowledged by newyork while it
was the origin included (failback copies them at the same offsets)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.producers import Ack, Producer, Target
from bench.chaos.topology import FAILED, PROMOTED, TOPICS, Topology

Cut = dict[tuple[str, int], int]  # (topic, partition) -> the common prefix a failback found


@dataclass
class Cycle:
    topology: Topology
    producers: list[Producer]
    cuts: list[Cut] = field(default_factory=list)  # one per failback
    kept_aside: int = 0

    def fresh(self, cluster: str) -> Any:
        from replication.models import Stream

        return Stream.objects.get(pk=self.topology.streams[cluster].pk)

    def fail_over(self) -> None:
        from replication.services import replica_failover

        replica_failover(actor=self.topology.actor, replica=self.fresh(PROMOTED),
                         source=self.fresh(FAILED), force=True)
        self.topology.failed_over = True
        for producer in self.movers:
            producer.target = Target(self.topology.streams[PROMOTED], len(self.cuts))

    @property
    def movers(self) -> list[Producer]:
        """The producers of sanfrancisco's topics: they follow the origin."""
        return [p for p in self.producers if set(p.topics) <= set(TOPICS[FAILED])]

    def fail_back(self) -> None:
        from replication.services import replica_failback

        # The failback drains the promoted stream into the old source before it switches: on
        # these two cores a drain chasing every producer at full rate did not end within its
        # 120 s, so the producers hold their next calls while it runs (those in flight end).
        for producer in self.producers:
            producer.held.set()
        try:
            report = replica_failback(actor=self.topology.actor, source=self.fresh(FAILED),
                                      replica=self.fresh(PROMOTED))
            self.cuts.append({(row["topic"], row["partition"]): row["commonPrefix"]
                              for row in report["partitions"]})
            self.kept_aside += report["keptAside"]
            self.topology.failed_over = False
            for producer in self.movers:
                producer.target = Target(self.topology.streams[FAILED], len(self.cuts))
        finally:
            for producer in self.producers:
                producer.held.clear()


@dataclass
class Acknowledged:
    """The acknowledged messages, sorted by where the final topology must hold them."""

    offsets: dict[str, dict[tuple[str, int], set[int]]]  # origin cluster -> offsets
    ids: dict[str, set[bytes]]  # sanfrancisco's topic -> every acknowledged id
    kept: dict[str, set[bytes]]  # sanfrancisco's topic -> the ids a failback kept aside


def acknowledged(acks: Iterable[Ack], topology: Topology, cuts: list[Cut]) -> Acknowledged:
    origin_of = {topic: cluster for cluster, topics in TOPICS.items() for topic in topics}
    failed = topology.streams[FAILED].path
    out = Acknowledged({cluster: {} for cluster in TOPICS}, {}, {})
    for ack in acks:
        origin = origin_of[ack.topic]
        if origin == FAILED:
            out.ids.setdefault(ack.topic, set()).add(ack.id)
        cut = cuts[ack.epoch].get((ack.topic, ack.partition)) if ack.epoch < len(cuts) else None
        if ack.path == failed and cut is not None and ack.offset >= cut:
            out.kept.setdefault(ack.topic, set()).add(ack.id)
        else:
            out.offsets[origin].setdefault((ack.topic, ack.partition), set()).add(ack.offset)
    return out


def check_failback(topology: Topology, acked: Acknowledged) -> Any:
    """The checker's report on sanfrancisco's topics and their divergence topics."""
    from replication.engine.checker import check_kept
    from replication.services.failback import DIVERGED_SUFFIX, HEADER
    from replication.stores import store_for

    stream = topology.streams[FAILED]
    return check_kept(store_for(stream.cluster), stream.uuid, list(TOPICS[FAILED]),
                      acknowledged=acked.ids, kept=acked.kept, suffix=DIVERGED_SUFFIX,
                      order_header=f"{HEADER}offset")
