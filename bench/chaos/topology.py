"""The soak's topology (three clusters, a multi-master pair and a secondary), set up through
the services, and what the driver and the checker read of it: each replica topic's ends, who
holds which link, which replicas lag their origins."""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

PARTITIONS = 4
TOPICS = {"sanfrancisco": ("sf0", "sf1"), "newyork": ("ny0", "ny1")}  # origin -> its topics
GATEWAYS = {"sanfrancisco": ("gw1", "gw2"), "newyork": ("gw1", "gw2"), "tokyo": ("gw1",)}
RESTARTED = "newyork"  # the cluster whose store runs on the private PostgreSQL
# The failover cycle (bench/chaos/failover.py): newyork takes over sanfrancisco's topics.
FAILED, PROMOTED = "sanfrancisco", "newyork"
Key = tuple[str, str]  # (stream path, topic)
Ends = dict[Key, dict[int, int] | None]


@dataclass
class Topology:
    actor: Any
    streams: dict[str, Any]  # cluster -> its /mapr/<cluster>/activity
    links: list[tuple[str, str]]  # (source cluster, replica cluster)
    failed_over: bool = False  # between a failover of newyork from sanfrancisco and its failback

    def origins(self) -> dict[str, tuple[str, ...]]:
        """Origin cluster -> its topics, now."""
        if not self.failed_over:
            return TOPICS
        return {PROMOTED: TOPICS[PROMOTED] + TOPICS[FAILED]}

    def pairs(self) -> Iterator[tuple[Any, Any, tuple[str, ...]]]:
        """(origin, a stream that must hold the origin's topics, those topics). While failed
        over, sanfrancisco is cut off: fenced, and no link reaches it."""
        for origin, topics in self.origins().items():
            for cluster, stream in self.streams.items():
                if cluster != origin and not (self.failed_over and cluster == FAILED):
                    yield self.streams[origin], stream, topics

    def moving_links(self) -> list[tuple[str, str]]:
        """The links that exist now: a failover ends both of the multi-master pair."""
        if not self.failed_over:
            return list(self.links)
        return [link for link in self.links if FAILED not in link]


def soak_user() -> Any:
    """An operator who is a member of a tenant: creates clusters and streams alike."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("createtenantuser", "--tenant", "chaos", "--username", "chaos", "--operator",
                 stdout=io.StringIO())
    return get_user_model().objects.get(username="chaos")


def build_topology(store_urls: dict[str, str]) -> Topology:
    from replication import services

    actor = soak_user()
    streams = {}
    for cluster, names in GATEWAYS.items():
        services.cluster_create(actor=actor, name=cluster, store_url=store_urls.get(cluster, ""))
        services.cluster_gateway_set(actor=actor, dstcluster=cluster, gateways=" ".join(names))
        streams[cluster] = services.stream_create(actor=actor, path=f"/mapr/{cluster}/activity")
    for origin, topics in TOPICS.items():
        for topic in topics:
            services.topic_create(actor=actor, stream=streams[origin], name=topic,
                                  partitions=PARTITIONS)
    links = [("sanfrancisco", "newyork"), ("newyork", "sanfrancisco"), ("newyork", "tokyo")]
    for source, replica in links:
        services.replica_connect(actor=actor, source=streams[source], replica=streams[replica])
    return Topology(actor, streams, links)


# --- what the driver and the checker read --------------------------------------------------------


def replica_ends(topology: Topology, down: frozenset[str] = frozenset()) -> Ends:
    """Each replica topic's ends; None for those on the clusters `down` (their store's pool
    would wait for a connection rather than fail) or that cannot be read."""
    return {(stream.path, topic): ends(stream, topic, down)
            for _origin, stream, topics in topology.pairs() for topic in topics}


def origin_ends(topology: Topology, down: frozenset[str] = frozenset()) -> Ends:
    return {(stream.path, topic): ends(origin, topic, down)
            for origin, stream, topics in topology.pairs() for topic in topics}


def held_by(pid: int, topology: Topology) -> set[str]:
    """The replica clusters of the links the replicator process `pid` holds leases on."""
    from replication.models import ReplicaLink
    from replication.transport import transport

    signals = transport().leases
    ids = {s.id for s in signals.replicators() if s.pid == pid}
    links = dict(ReplicaLink.objects.filter(replica__path__in=[
        s.path for s in topology.streams.values()]).values_list("pk", "replica__cluster__name"))
    return {links[link] for link, owner in signals.lease_holders(links).items() if owner in ids}


def moved(before: Ends, now: Ends, origins: Ends, clusters: set[str],
          held: frozenset[str] = frozenset()) -> bool:
    """Every replica topic of `clusters` advanced since `before`, or holds all its origin has
    (nothing stopped: moving at once). Streams in `held` are skipped: a Spark catch-up has
    their link, which moves when the job ends, whatever the fault."""
    return not stalled(before, now, origins, clusters, held)


def stalled(before: Ends, now: Ends, origins: Ends, clusters: set[str],
            held: frozenset = frozenset()) -> list[str]:
    """The replica topics that keep `moved` false, as text (the watchdog prints them). `held`:
    streams (paths) and replica topics ((path, topic)) a catch-up holds (`held_through`)."""
    out = []
    for key, ends_now in now.items():
        if key[0].split("/")[2] not in clusters or key[0] in held or key in held:
            continue
        if ends_now is None:
            out.append(f"{key[0]}:{key[1]} not readable (its store down?)")
            continue
        if ends_now == origins.get(key):
            continue
        then = before.get(key) or {}
        if sum(ends_now.values()) <= sum(then.values()):
            out.append(f"{key[0]}:{key[1]} at {ends_now} as before, origin at "
                       f"{origins.get(key)}")
    return out


def recovery_since(at: float, topics: Iterable[tuple[str, str]],
                   last_held: Mapping[object, float]) -> float:
    """When the recovery clock of a fault injected `at` starts for replica `topics`: then, or
    later when a catch-up last held one of them (`held_through`): a held topic cannot move, so
    its deadline runs from when it was let go."""
    return max([at, *(last_held.get(k, 0.0) for key in topics for k in (key[0], key))])


def held_through(topology: Topology, destinations: frozenset[str]) -> frozenset:
    """What catch-ups into `destinations` hold: those streams, and in the streams they feed
    (along moving links) the topics that pass through them, which cannot move past their frozen
    copy. A downstream stream's own topics, and the held stream's own, still must move."""
    cluster_of = {stream.path: cluster for cluster, stream in topology.streams.items()}
    origin_of = {topic: cluster for cluster, topics in topology.origins().items()
                 for topic in topics}
    held: set = set(destinations)
    for start in {cluster_of[p] for p in destinations if p in cluster_of}:
        seen, frontier = {start}, {start}
        while frontier:
            frontier = {dst for src, dst in topology.moving_links() if src in frontier} - seen
            seen |= frontier
            held |= {(topology.streams[c].path, topic) for c in frontier
                     for topic, origin in origin_of.items() if origin not in (start, c)}
    return frozenset(held)


def ends(stream: Any, topic: str, down: frozenset[str] = frozenset()) -> dict[int, int] | None:
    from replication.stores import store_for

    if stream.cluster.name in down:
        return None
    try:
        # A partition that never held a message may not exist on a replica yet.
        return {p: high for p, (_, high) in
                store_for(stream.cluster).watermarks(stream.uuid, topic).items() if high}
    except Exception:  # not heard of yet, or the restarted store's pool reconnecting
        return None


def behind(topology: Topology) -> list[str]:
    """Each (stream, topic) whose partitions' ends differ from its origin's, as text."""
    out = []
    for origin, stream, topics in topology.pairs():
        for topic in topics:
            want, have = ends(origin, topic), ends(stream, topic)
            if want is None or have != want:
                out.append(f"{stream.path}:{topic} at {have}, origin {origin.path} at {want}")
    return out


def wait_live(engine_gateways: list[tuple[str, str]], timeout: float = 60.0) -> None:
    from replication.transport import transport

    deadline = time.monotonic() + timeout
    while len(transport().gateways.live(engine_gateways)) < len(engine_gateways):
        if time.monotonic() > deadline:
            raise RuntimeError(f"gateways not live after {timeout:.0f} s")
        time.sleep(0.2)
