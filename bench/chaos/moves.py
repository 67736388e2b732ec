"""Partition moves under the chaos soak (issue 33): newyork, whose topics every interface
writes (services, REST, the command line, Kafka), gets a second store group at set-up, and the
fault `move` moves a random partition of one of its topics to its other group while the
producers write and the driver goes on killing gateways, replicators, the listener and the
store. Each move runs in a thread of its own, throttled (it sleeps between its copy and its
cut-over) so it lasts a few seconds and overlaps other faults; a move that fails is retried.

After each move its outcome is read where it is decided (replication/services/partitionmove.py:
the placement row is the commit point): `completed` (placed on the target at the first try),
`retried` (placed there after failed tries) or `left` (every try failed, still placed on the
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

from bench.chaos.topology import PARTITIONS, TOPICS

MOVED = "newyork"  # the cluster of the Kafka, REST and CLI producers
GROUPS = ("s1", "s2")  # its home group and the one added at set-up
ATTEMPTS = 8  # tries of one move before it is reported `left`
THROTTLE = (1.0, 3.0)  # seconds a move waits between its copy and its cut-over
CHECKS = 30  # tries to read a group's held flag (its server may be restarting)


@dataclass
class Move:
    topic: str
    partition: int
    source: str
    target: str
    began: float
    seconds: float = 0.0
    attempts: int = 0
    outcome: str = ""  # completed, retried, left
    placed: str = ""  # the group the placement names after the move
    held: dict[str, bool | None] = field(default_factory=dict)  # group -> its held flag
    errors: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Exactly the placed group holds the partition (a store not read counts against)."""
        return all(self.held.get(g) is (g == self.placed) for g in GROUPS)


def add_group(topology: Any, url: str) -> None:
    """newyork's second store group, on `url` (a database of the run's private servers)."""
    from replication.services.storegroups import store_group_add

    store_group_add(actor=topology.actor, cluster=MOVED, name=GROUPS[1], url=url)


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
    """Runs one move at a time in a thread; the driver starts them (`start`)."""

    topology: Any
    rng: Any
    say: Callable[[str], None]
    moves: list[Move] = field(default_factory=list)
    thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> Move | None:
        """Move a random partition of a random newyork topic to its other group; None while a
        move runs still."""
        if self.busy:
            return None
        stream = self.topology.streams[MOVED]
        topic = self.rng.choice(TOPICS[MOVED])
        partition = self.rng.randrange(PARTITIONS)
        source = placed(stream, topic, partition)
        move = Move(topic, partition, source, next(g for g in GROUPS if g != source),
                    time.monotonic())
        throttle = self.rng.uniform(*THROTTLE)
        self.moves.append(move)
        self.thread = threading.Thread(target=self._run, args=(move, throttle),
                                       name="partition-move", daemon=True)
        self.thread.start()
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
            self.say(f"move of {move.topic}[{move.partition}] {move.source} -> {move.target}: "
                     f"{move.outcome} after {move.attempts} tries in {move.seconds:.1f} s, "
                     f"placed on {move.placed}, held {move.held}"
                     + (f" (last error: {move.errors[-1][:200]})" if move.errors else ""))

    def _move(self, move: Move, throttle: float) -> None:
        from replication.services.partitionmove import partition_move

        stream, actor = self.topology.streams[MOVED], self.topology.actor

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
                time.sleep(1.0 + attempt)
        move.outcome = "left"

    def _verify(self, move: Move) -> None:
        """What the placement says, and each group's held flag; a move left half-way (cut
        over, never switched) is given back to its source first, as Celery beat's sweep
        does."""
        from replication import placement
        from replication.services.partitionmove import moves_recover

        stream = self.topology.streams[MOVED]
        move.placed = placed(stream, move.topic, move.partition)
        if move.outcome == "left":
            moves_recover(stream.cluster)
            placement.forget(MOVED)
        for group, url in group_urls(stream.cluster).items():
            move.held[group] = held_flag(url, stream, move.topic, move.partition)

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def disagreements(self) -> int:
        """Moves after which the stores' held flags disagree with the placement, or whose
        outcome contradicts it (completed yet placed on the source, or the reverse)."""
        wrong = 0
        for move in self.moves:
            expected = move.source if move.outcome == "left" else move.target
            wrong += not move.agrees or move.placed != expected
        return wrong

    def table(self) -> str:
        lines = ["| move | from | to | outcome | tries | seconds | placed | held by |",
                 "| --- | --- | --- | --- | ---: | ---: | --- | --- |"]
        for m in self.moves:
            holders = ", ".join(g for g, h in m.held.items() if h) or "none"
            lines.append(f"| {m.topic}[{m.partition}] | {m.source} | {m.target} | {m.outcome} | "
                         f"{m.attempts} | {m.seconds:.1f} | {m.placed} | {holders} |")
        counts = {o: sum(m.outcome == o for m in self.moves)
                  for o in ("completed", "retried", "left")}
        lines.append("")
        lines.append(f"moves: {len(self.moves)} ({', '.join(f'{n} {o}' for o, n in counts.items())}"
                     f"); held flags disagreeing with the placement: {self.disagreements()} "
                     "(must be 0)")
        return "\n".join(lines)
