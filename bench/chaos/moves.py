"""Partition moves under the chaos soak (issue 33): every cluster of the soak gets a second
store group at set-up, and the fault `move` moves random partitions of its stream to its other
group while the producers write and the driver goes on killing gateways, replicators, the
listener and the store. The partitions moved are of every kind the soak has: newyork's own
topics (which every interface writes: services, REST, the command line, Kafka), and the replica
partitions a gateway writes by applying replication: sanfrancisco's topics on newyork (the
failover path: newyork takes them over at a failover, and drains them back at the failback),
newyork's topics on sanfrancisco, and all four on tokyo (fed through newyork). A cluster whose
second group would sit on the restarted server (a run without `others`) keeps one group.

Each move runs in a thread of its own, throttled (it sleeps between its copy and its cut-over)
so it lasts a few seconds and overlaps other faults; a move that fails is retried. Up to
CONCURRENT moves run at once: an injection starts one or two, a pair often of two partitions of
the same topic, in opposite directions when the topic sits on both groups.

After each move its outcome is read where it is decided (replication/services/partitionmove.py:
the placement row is the commit point, so a try that failed after it moved the partition all
the same): `completed` (placed on the target at the first try), `retried` (placed there after
failed tries) or `left` (every try failed, still placed on the
source). Then the stores' held flags must agree with the placement: the placed group holds the
partition and the other does not (never both, never neither); a disagreement is counted and
fails the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.chaos.topology import FAILED, PARTITIONS, PROMOTED, RESTARTED, TOPICS

MOVED = ("newyork", "sanfrancisco", "tokyo")  # the clusters given a second group
GROUPS = ("s1", "s2")  # each one's home group and the one added at set-up
ATTEMPTS = 8  # tries of one move before it is reported `left`
THROTTLE = (1.0, 3.0)  # seconds a move waits between its copy and its cut-over
CHECKS = 30  # tries to read a group's held flag (its server may be restarting)
CONCURRENT = 2  # moves running at once, at most
TOGETHER = 0.5  # the chance an injection with room for two starts a pair
Key = tuple[str, str, int]  # (cluster, topic, partition)
# Every soak stream holds all four topics: its own, and the others' as replicas.
ALL_TOPICS = tuple(t for topics in TOPICS.values() for t in topics)


def group_key(cluster: str) -> str:
    """The key of a cluster's second group's URL among the soak's store URLs."""
    return f"{cluster} {GROUPS[1]}"


def group_urls_wanted(store: Any, others: Any) -> dict[str, str]:
    """Where each cluster's second group lives: on the server never restarted (`others`);
    without one, only newyork's, on its own server as before."""
    clusters = MOVED if others is not None else (RESTARTED,)
    return {group_key(c): (others or store).url(f"{c}_{GROUPS[1]}_store") for c in clusters}


@dataclass
class Move:
    cluster: str
    topic: str
    partition: int
    source: str
    target: str
    began: float
    role: str = ""  # `origin` (its producers write it) or `replica` (a gateway applies it)
    seconds: float = 0.0
    attempts: int = 0
    outcome: str = ""  # completed, retried, left
    placed: str = ""  # the group the placement names after the move
    held: dict[str, bool | None] = field(default_factory=dict)  # group -> its held flag
    errors: list[str] = field(default_factory=list)
    together: set[int] = field(default_factory=set)  # numbers of the moves it overlapped

    @property
    def key(self) -> Key:
        return (self.cluster, self.topic, self.partition)

    @property
    def name(self) -> str:
        return f"{self.cluster}:{self.topic}[{self.partition}]"

    @property
    def agrees(self) -> bool:
        """Exactly the placed group holds the partition (a store not read counts against)."""
        return all(self.held.get(g) is (g == self.placed) for g in GROUPS)


def add_groups(topology: Any, urls: dict[str, str]) -> list[str]:
    """Each cluster's second group, on its URL among `urls` (group_urls_wanted); the clusters
    that got one."""
    from replication.services.storegroups import store_group_add

    given = [c for c in MOVED if group_key(c) in urls]
    for cluster in given:
        store_group_add(actor=topology.actor, cluster=cluster, name=GROUPS[1],
                        url=urls[group_key(cluster)])
    return given


def placed(stream: Any, topic: str, partition: int) -> str:
    from replication.models import Placement

    row = Placement.objects.filter(stream=stream, topic=topic, partition=partition).first()
    return row.group.name if row is not None else GROUPS[0]


def group_urls(cluster: Any) -> dict[str, str]:
    from replication.services.storegroups import group_store_url, groups_of

    return {g.name: group_store_url(cluster, g) for g in groups_of(cluster)}


def held_flag(url: str, stream: Any, topic: str, partition: int) -> bool | None:
    """The group's held flag for the partition, read in its database (None: unreachable)."""
    url = url.replace("postgres://", "postgresql://", 1)
    for _ in range(CHECKS):
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                row = conn.execute("SELECT held FROM partitions WHERE stream = %s AND topic = %s "
                                   "AND partition = %s", (stream.uuid, topic, partition)
                                   ).fetchone()
            return bool(row and row[0])
        except psycopg.Error:
            time.sleep(1.0)
    return None


@dataclass
class Mover:
    """Runs moves in threads, up to CONCURRENT at once; the driver starts them (`start`)."""

    topology: Any
    rng: Any
    say: Callable[[str], None]
    clusters: tuple[str, ...] = MOVED  # those with a second group
    moves: list[Move] = field(default_factory=list)
    threads: dict[int, threading.Thread] = field(default_factory=dict)  # move number -> thread
    lock: threading.Lock = field(default_factory=threading.Lock)

    def running(self) -> list[int]:
        return [n for n, thread in self.threads.items() if thread.is_alive()]

    def start(self, path: tuple[str, ...] = ()) -> list[Move]:
        """Move a random partition to its cluster's other group, and with room for two now and
        then a second one beside it; none while CONCURRENT moves run. With `path`, only
        partitions of sanfrancisco's topics on those clusters (the failover path: the driver
        moves them as it fails over and back, one even past CONCURRENT, so that every soak
        moves them then), as the opening pair does on newyork."""
        room = CONCURRENT - len(self.running())
        if path:
            room = max(room, 1)
        if room <= 0:
            return []
        opening = not self.moves
        path = path or ((PROMOTED,) if opening else ())
        first = self._pick(None, path)
        if first is None:
            return []
        started = [self._launch(*first)]
        if room > 1 and (opening or self.rng.random() < TOGETHER):
            second = self._pick(started[0], path)
            if second is not None:
                started.append(self._launch(*second))
        return started

    def _candidates(self, path: tuple[str, ...]) -> list[Key]:
        moving = {self.moves[n].key for n in self.running()}
        if path:
            keys = [(c, t, p) for c in path if c in self.clusters for t in TOPICS[FAILED]
                    for p in range(PARTITIONS)]
        else:
            keys = [(c, t, p) for c in self.clusters for t in ALL_TOPICS
                    for p in range(PARTITIONS)]
        return [k for k in keys if k not in moving]

    def _pick(self, beside: Move | None, path: tuple[str, ...]) -> tuple[Key, str] | None:
        """A partition not moving now, and its group: a cluster at random, then one of its
        topics and partitions; beside another move, preferably of the same topic, and on the
        other group (the pair goes both ways)."""
        free = self._candidates(path)
        if beside is not None:
            same = [k for k in free if k[:2] == beside.key[:2]]
            other_way = [k for k in same if self._placed(k) == beside.target]
            free = other_way or same or free
        else:
            cluster = self.rng.choice(sorted({k[0] for k in free})) if free else None
            free = [k for k in free if k[0] == cluster]
        if not free:
            return None
        key = self.rng.choice(free)
        return key, self._placed(key)

    def _placed(self, key: Key) -> str:
        return placed(self.topology.streams[key[0]], key[1], key[2])

    def _launch(self, key: Key, source: str) -> Move:
        cluster, topic, partition = key
        move = Move(cluster, topic, partition, source,
                    next(g for g in GROUPS if g != source), time.monotonic(),
                    role=role_of(self.topology, cluster, topic))
        throttle = self.rng.uniform(*THROTTLE)
        with self.lock:
            number = len(self.moves)
            for other in self.running():
                self.moves[other].together.add(number)
                move.together.add(other)
            self.moves.append(move)
        thread = threading.Thread(target=self._run, args=(move, throttle),
                                  name=f"partition-move-{number}", daemon=True)
        self.threads[number] = thread
        thread.start()
        return move

    def _run(self, move: Move, throttle: float) -> None:
        from django.db import connection

        try:
            self._move(move, throttle)
            self._verify(move)
        except Exception as error:  # the control database itself failing: reported, counted
            move.errors.append(f"{type(error).__name__}: {error}")
            move.outcome = move.outcome or "left"
        finally:
            move.seconds = time.monotonic() - move.began
            connection.close()
            self.say(f"move of {move.name} ({move.role}) {move.source} -> {move.target}: "
                     f"{move.outcome} after {move.attempts} tries in {move.seconds:.1f} s, "
                     f"placed on {move.placed}, held {move.held}"
                     + (f" (last error: {move.errors[-1][:200]})" if move.errors else ""))

    def _move(self, move: Move, throttle: float) -> None:
        from replication.services.partitionmove import partition_move

        stream, actor = self.topology.streams[move.cluster], self.topology.actor

        def pause(stage: str) -> None:
            if stage == "copied":  # the history copied, the cut-over to come: writers go on
                time.sleep(throttle)

        for attempt in range(1, ATTEMPTS + 1):
            move.attempts = attempt
            try:
                partition_move(actor=actor, stream=stream, topic=move.topic,
                               partition=move.partition, to=move.target, pause=pause)
                move.outcome = "completed" if attempt == 1 else "retried"
                return
            except Exception as error:  # a store or process killed under it: try again
                move.errors.append(f"{type(error).__name__}: {str(error)[:300]}")
                # The placement row is the commit point: a try that failed after it (in its
                # hold or clean-up, which the sweep finishes) moved the partition all the same.
                if placed(stream, move.topic, move.partition) == move.target:
                    move.outcome = "completed" if attempt == 1 else "retried"
                    return
                time.sleep(1.0 + attempt)
        move.outcome = "left"

    def _verify(self, move: Move) -> None:
        """What the placement says, and each group's held flag; a move left half-way (cut
        over, never switched) is given back to its source first, as Celery beat's sweep
        does."""
        from replication import placement
        from replication.services.partitionmove import moves_recover

        stream = self.topology.streams[move.cluster]
        move.placed = placed(stream, move.topic, move.partition)
        if move.outcome == "left":
            moves_recover(stream.cluster)
            placement.forget(move.cluster)
        for group, url in group_urls(stream.cluster).items():
            move.held[group] = held_flag(url, stream, move.topic, move.partition)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in list(self.threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))

    def disagreements(self) -> int:
        """Moves after which the stores' held flags disagree with the placement, or whose
        outcome contradicts it (completed yet placed on the source, or the reverse)."""
        wrong = 0
        for move in self.moves:
            expected = move.source if move.outcome == "left" else move.target
            wrong += not move.agrees or move.placed != expected
        return wrong

    def concurrent(self) -> int:
        """Moves that ran while another did."""
        return sum(bool(m.together) for m in self.moves)

    def table(self) -> str:
        lines = ["| # | move | kind | from | to | outcome | tries | seconds | with | placed | "
                 "held by |",
                 "| ---: | --- | --- | --- | --- | --- | ---: | ---: | --- | --- | --- |"]
        for n, m in enumerate(self.moves):
            holders = ", ".join(g for g, h in m.held.items() if h) or "none"
            with_ = ", ".join(f"#{o}" for o in sorted(m.together)) or "-"
            lines.append(f"| {n} | {m.name} | {m.role} | {m.source} | {m.target} | {m.outcome} "
                         f"| {m.attempts} | {m.seconds:.1f} | {with_} | {m.placed} | {holders} |")
        counts = {o: sum(m.outcome == o for m in self.moves)
                  for o in ("completed", "retried", "left")}
        kinds = {r: sum(m.role == r for m in self.moves) for r in ("origin", "replica")}
        lines.append("")
        lines.append(f"moves: {len(self.moves)} ({', '.join(f'{n} {o}' for o, n in counts.items())}"
                     f"; {kinds['origin']} of origin partitions, {kinds['replica']} of replica "
                     f"ones; {self.concurrent()} alongside another); held flags disagreeing "
                     f"with the placement: {self.disagreements()} (must be 0)")
        return "\n".join(lines)


def role_of(topology: Any, cluster: str, topic: str) -> str:
    """`origin` when the cluster's producers write the topic now (newyork holds sanfrancisco's
    topics as their origin between a failover and its failback), else `replica`."""
    return "origin" if topic in topology.origins().get(cluster, ()) else "replica"
