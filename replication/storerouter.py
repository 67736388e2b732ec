"""A cluster's message store when it has several store groups (issue 33): the MessageStore
interface over the groups, each per-partition call sent to the group holding the partition
(placement.py), each stream-wide call sent to every group and the answers merged, and each
multi-partition write split per group.

A write to a partition with no group yet places it first (the least-loaded group). A write a
store refuses as NOT_HELD (its placement fence, engine/fence.py: this process's placement was
stale) rolls back whole there; the router reloads the placement, repairs the fence flags of
the topic from it and sends the call again, to the group now named.

A multi-partition write that spans groups is one transaction per group, not one in all: each
partition's write is still atomic, which is what Kafka promises of a produce request.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from uuid import UUID

from replication import placement
from replication.engine import fence
from replication.engine.store import (
    Applied,
    Message,
    Record,
    StoreError,
    UnknownTopic,
    plan_partitions,
)
from replication.engine.storebase import MessageStore
from replication.errors import PartitionMoving

T = TypeVar("T")
ATTEMPTS = 8
BACKOFF = 0.02  # seconds before the second attempt, doubled each time (at most 0.5)


class NotRouted(StoreError):
    """A store call the router does not send across groups yet."""


class GroupRouter:
    """Duck-types MessageStore (every public method callers use) over the groups of a View."""

    def __init__(self, view: placement.View) -> None:
        self.cluster = view.cluster
        self._initial = view
        home = view.stores[view.home]
        self.KEEPS_BATCHES = home.KEEPS_BATCHES
        self.SEQUENCES_TOGETHER = home.SEQUENCES_TOGETHER
        self.DIALECT = home.DIALECT
        self._rr = 0

    # --- routing ------------------------------------------------------------------------------

    def view(self) -> placement.View:
        return placement.view_of(self.cluster) or self._initial

    def store_of(self, stream: UUID, topic: str, partition: int) -> MessageStore:
        """The store of the group holding the partition now (its home group if unplaced)."""
        view = self.view()
        return view.stores[view.group_of(stream, topic, partition) or view.home]

    def _groups_of(self, view: placement.View, stream: UUID, topic: str,
                   partitions: Sequence[int], write: bool) -> tuple[placement.View, list[str]]:
        if write and any(view.group_of(stream, topic, p) is None for p in partitions):
            view = placement.place(view, stream, topic, partitions)
        return view, [view.group_of(stream, topic, p) or view.home for p in partitions]

    def _routed(self, stream: UUID, topic: str, partitions: Sequence[int], write: bool,
                call: Callable[[placement.View, list[str]], T]) -> T:
        view = self.view()
        for attempt in range(ATTEMPTS):
            view, groups = self._groups_of(view, stream, topic, partitions, write)
            try:
                return call(view, groups)
            except Exception as err:
                if not fence.is_not_held(err):
                    raise
                if attempt == ATTEMPTS - 1:
                    raise PartitionMoving(f"{fence.NOT_HELD} (topic {topic}, partitions "
                                          f"{sorted(set(partitions))}): it is moving between "
                                          "store groups; retry in a moment") from err
                fresh = placement.refresh(self.cluster, view, force=True) or view
                if fresh.version == view.version:
                    # Held nowhere under this placement: a move's cut-over between its source
                    # letting go and the placement naming the target (services/partitionmove).
                    time.sleep(min(BACKOFF * 2 ** attempt, 0.5))
                view = fresh
                placement.hold(view, stream, topic)
        raise AssertionError("unreachable")

    def _one(self, stream: UUID, topic: str, partition: int, write: bool,
             call: Callable[[MessageStore], T]) -> T:
        return self._routed(stream, topic, [partition], write,
                            lambda view, groups: call(view.stores[groups[0]]))

    def _every(self) -> list[MessageStore]:
        return list(self.view().stores.values())

    # --- per partition ----------------------------------------------------------------------

    def read(self, stream: UUID, topic: str, partition: int, *a: Any, **k: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.read(stream, topic, partition, *a, **k))

    def read_rows(self, stream: UUID, topic: str, partition: int, *a: Any, **k: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.read_rows(stream, topic, partition, *a, **k))

    def fetch(self, stream: UUID, topic: str, partition: int, *a: Any, **k: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.fetch(stream, topic, partition, *a, **k))

    def offset_for_time(self, stream: UUID, topic: str, partition: int, *a: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.offset_for_time(stream, topic, partition, *a))

    def max_timestamp(self, stream: UUID, topic: str, partition: int) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.max_timestamp(stream, topic, partition))

    def producer_state(self, stream: UUID, topic: str, partition: int, *a: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.producer_state(stream, topic, partition, *a))

    def producer_states(self, stream: UUID, topic: str, partition: int) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.producer_states(stream, topic, partition))

    def batch_holding(self, stream: UUID, topic: str, partition: int, *a: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.batch_holding(stream, topic, partition, *a))

    def txn_view(self, stream: UUID, topic: str, partition: int, *a: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.txn_view(stream, topic, partition, *a))

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        return self._one(stream, topic, partition, False,
                         lambda s: s.replication_cursor(stream, link, topic, partition))

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None:
        return self._one(stream, topic, partition, False,
                         lambda s: s.fetch_cursor(stream, group, topic, partition))

    def commit_cursor(self, stream: UUID, group: str, topic: str, partition: int,
                      offset: int) -> None:
        self.commit_cursors(stream, group, [(topic, partition, offset)])

    def trim(self, stream: UUID, topic: str, partition: int, *a: Any, **k: Any) -> int:
        return self._one(stream, topic, partition, True,
                         lambda s: s.trim(stream, topic, partition, *a, **k))

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        return self._one(stream, topic, partition, True,
                         lambda s: s.truncate(stream, topic, partition, offset))

    def compact(self, stream: UUID, topic: str, partition: int, **k: Any) -> Any:
        return self._one(stream, topic, partition, True,
                         lambda s: s.compact(stream, topic, partition, **k))

    def write_marker(self, stream: UUID, topic: str, partition: int, **k: Any) -> Any:
        return self._one(stream, topic, partition, True,
                         lambda s: s.write_marker(stream, topic, partition, **k))

    def txn_kinds(self, stream: UUID, topic: str, partition: int, *a: Any) -> Any:
        return self._one(stream, topic, partition, False,
                         lambda s: s.txn_kinds(stream, topic, partition, *a))

    def write_markers(self, partitions: Sequence[tuple[UUID, str, int]], *,
                      cursors: Sequence[tuple[UUID, str, Sequence[tuple]]] = (), **k: Any
                      ) -> dict:
        """A transaction's end: each group's markers and the offsets it holds in one store
        transaction there (Kafka writes each partition's marker on its own leader too)."""
        work: dict[int, tuple[MessageStore, list, list]] = {}

        def of(stream: UUID, topic: str, partition: int) -> tuple[MessageStore, list, list]:
            store = self.store_of(stream, topic, partition)
            return work.setdefault(id(store), (store, [], []))

        for at in partitions:
            of(*at)[1].append(at)
        for stream, group, commits in cursors:
            for commit in commits:  # (topic, partition, offset, ...)
                of(stream, commit[0], commit[1])[2].append((stream, group, [commit]))
        out: dict = dict.fromkeys(partitions)
        for store, mine, offsets in work.values():
            out.update(store.write_markers(mine, cursors=offsets, **k))
        return out

    def append_raw(self, stream: UUID, topic: str, partition: int, *a: Any, **k: Any) -> Any:
        return self._one(stream, topic, partition, True,
                         lambda s: s.append_raw(stream, topic, partition, *a, **k))

    def apply_from(self, source: Any, source_stream: UUID, stream: UUID, topic: str,
                   partition: int, *a: Any, **k: Any) -> Applied:
        # The source's own group's store: the pipe reads its tables directly.
        if isinstance(source, GroupRouter):
            source = source.store_of(source_stream, topic, partition)
        return self._one(stream, topic, partition, True, lambda s: s.apply_from(
            source, source_stream, stream, topic, partition, *a, **k))

    # --- multi-partition writes, split per group ----------------------------------------------

    def append(self, stream: UUID, topic: str, records: Sequence[Record], **k: Any
               ) -> list[tuple[int, int]]:
        if not records:
            return []
        if any(r.partition is None for r in records):
            # Partitions are chosen here, over the whole topic, as one store would choose them.
            plan = plan_partitions(records, self.partitions(stream, topic), self._rr)
            self._rr = plan.counter
            records = [r if r.partition == p else replace(r, partition=p)
                       for r, p in zip(records, plan.parts, strict=True)]
        parts = sorted({r.partition for r in records})
        placed: dict[int, tuple[int, int]] = {}  # by record index, kept over the retries
        return self._routed(stream, topic, parts, True, lambda view, groups: _append_split(
            view, dict(zip(parts, groups, strict=True)), stream, topic, records, k, placed))

    def append_batches(self, stream: UUID, topic: str, batches: dict[int, list], *,
                       sequences: dict | None = None, **k: Any) -> dict[int, int]:
        parts = sorted(batches)
        firsts: dict[int, int] = {}  # kept over the retries, as append's `placed`

        def split(view: placement.View, groups: list[str]) -> dict[int, int]:
            by_group: dict[str, dict[int, list]] = defaultdict(dict)
            for p, group in zip(parts, groups, strict=True):
                if p not in firsts:  # stored by an earlier attempt: never twice
                    by_group[group][p] = batches[p]
            for group, mine in by_group.items():
                if sequences:  # an idempotent producer's: each group's its own
                    k["sequences"] = {p: sequences[p] for p in mine}
                firsts.update(view.stores[group].append_batches(stream, topic, mine, **k))
            return firsts

        return self._routed(stream, topic, parts, True, split)

    def apply(self, stream: UUID, messages: Sequence[Message], *, link: str,
              origin_low: dict | None = None) -> Applied:
        by_topic: dict[str, list[Message]] = defaultdict(list)
        for m in messages:
            by_topic[m.topic].append(m)
        ends: dict = {}
        written: dict = {}
        nbytes = 0
        for topic, mine in by_topic.items():
            parts = sorted({m.partition for m in mine})
            done: dict[int, Applied] = {}  # by partition, kept over the retries
            self._routed(stream, topic, parts, True, lambda view, groups, ms=mine, ps=parts,
                         done=done: _apply_split(view, dict(zip(ps, groups, strict=True)),
                                                 stream, ms, link, origin_low, done))
            for applied in {id(a): a for a in done.values()}.values():
                ends.update(applied.ends)
                written.update(applied.written)
                nbytes += applied.bytes
        return Applied(ends, written, nbytes)

    def commit_cursors(self, stream: UUID, group: str, cursors: Sequence[tuple]) -> None:
        by_topic: dict[str, list[tuple]] = defaultdict(list)
        for cursor in cursors:
            by_topic[cursor[0]].append(cursor)
        for topic, mine in by_topic.items():
            parts = sorted({c[1] for c in mine})

            def split(view: placement.View, groups: list[str], mine: list = mine,
                      parts: list = parts) -> None:
                where = dict(zip(parts, groups, strict=True))
                for name in set(groups):
                    view.stores[name].commit_cursors(
                        stream, group, [c for c in mine if where[c[1]] == name])

            self._routed(stream, topic, parts, False, split)

    def merge_cursors(self, stream: UUID, cursors: Sequence[Any]) -> dict:
        view = self.view()
        for attempt in range(ATTEMPTS):
            try:
                return self._merge_cursors(view, stream, cursors)
            except Exception as err:
                # A partition moved away (the cursors' fence, engine/partitionmove.py): merges
                # never move a cursor back, so the groups already merged take them again.
                if not fence.is_not_held(err) or attempt == ATTEMPTS - 1:
                    raise
                time.sleep(min(BACKOFF * 2 ** attempt, 0.5))
                view = placement.refresh(self.cluster, view, force=True) or view
                for topic in {c[1] for c in cursors}:
                    placement.hold(view, stream, topic)
        raise AssertionError("unreachable")

    @staticmethod
    def _merge_cursors(view: placement.View, stream: UUID, cursors: Sequence[Any]) -> dict:
        by_group: dict[str, list] = defaultdict(list)
        for cursor in cursors:
            topic, partition = cursor[1], cursor[2]
            by_group[view.group_of(stream, topic, partition) or view.home].append(cursor)
        merged: dict = {}
        for name, mine in by_group.items():
            merged.update(view.stores[name].merge_cursors(stream, mine))
        return merged

    # --- stream-wide, fanned out and merged ---------------------------------------------------

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise StoreError(f"a topic needs at least one partition, not {partitions}")
        placement.place(self.view(), stream, topic, range(partitions))

    def partitions(self, stream: UUID, topic: str) -> int:
        view = self.view()
        return view.stores[view.home].partitions(stream, topic)  # every group has every row

    def _by_holder(self, stream: UUID, topic: str,
                   call: Callable[[MessageStore], dict[int, T]]) -> dict[int, T]:
        """Each partition's answer from the group holding it (unplaced: the home group)."""
        view = self.view()
        answers = {view.home: call(view.stores[view.home])}
        for name, store in view.stores.items():
            if name not in answers:
                with contextlib.suppress(UnknownTopic):  # a group made before the topic's rows
                    answers[name] = call(store)
        home = answers[view.home]
        return {p: answers.get(view.group_of(stream, topic, p) or view.home, home)[p]
                for p in home}

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        return self._by_holder(stream, topic, lambda s: s.watermarks(stream, topic))

    def partition_stats(self, stream: UUID, topic: str) -> list:
        merged = self._by_holder(stream, topic, lambda s: {
            st.partition: st for st in s.partition_stats(stream, topic)})
        return [merged[p] for p in sorted(merged)]

    def open_transactions(self, stream: UUID, topic: str, partitions: Sequence[int]) -> dict:
        out: dict = {}
        for p in partitions:
            out.update(self.store_of(stream, topic, p).open_transactions(stream, topic, [p]))
        return out

    def fetch_partitions(self, stream: UUID, topic: str, reads: Sequence[tuple[int, int, int]],
                         committed: bool = False) -> tuple[dict, list, list]:
        view = self.view()
        by_group: dict[str, list[int]] = defaultdict(list)
        for i, (p, _, _) in enumerate(reads):
            by_group[view.group_of(stream, topic, p) or view.home].append(i)
        marks = self.watermarks(stream, topic)
        fetched: list = [None] * len(reads)
        views: list = [None] * len(reads) if committed else []
        for name, indexes in by_group.items():
            _, got, txns = view.stores[name].fetch_partitions(
                stream, topic, [reads[i] for i in indexes], committed)
            for at, i in enumerate(indexes):
                fetched[i] = got[at]
                if committed and txns:
                    views[i] = txns[at]
        return marks, fetched, views

    def sizes(self, stream: UUID) -> dict:
        each = [s.sizes(stream) for s in self._every()]
        return {"logicalsize": sum(e["logicalsize"] for e in each),
                "physicalsize": sum(e["physicalsize"] for e in each),
                "numtopics": max(e["numtopics"] for e in each)}

    def ends_of(self, streams: Sequence[UUID]) -> dict[tuple[UUID, str, int], tuple[int, int]]:
        """Each partition's ends from the group holding it (unplaced: the home group): the
        other groups keep only its held-elsewhere rows."""
        view = self.view()
        ends = {}
        for name, store in view.stores.items():
            for key, marks in store.ends_of(streams).items():
                if (view.group_of(*key) or view.home) == name:
                    ends[key] = marks
        return ends

    def logical_sizes(self) -> dict[UUID, int]:
        sizes: dict[UUID, int] = defaultdict(int)
        for store in self._every():
            for stream, size in store.logical_sizes().items():
                sizes[stream] += size
        return dict(sizes)

    def cursor_streams(self) -> set[UUID]:
        return {stream for s in self._every() for stream in s.cursor_streams()}

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        return sorted(c for s in self._every() for c in s.cursors(stream))

    def commits(self, stream: UUID) -> list:
        return sorted((c for s in self._every() for c in s.commits(stream)),
                      key=lambda c: (c.group, c.topic, c.partition))

    def delete_cursors(self, stream: UUID, **k: Any) -> int:
        return sum(s.delete_cursors(stream, **k) for s in self._every())

    def holding_streams(self) -> set[UUID]:
        return set().union(*(s.holding_streams() for s in self._every()))

    def expire(self, stream: UUID, **k: Any) -> int:
        return sum(s.expire(stream, **k) for s in self._every())

    def abort_open(self, stream: UUID, topic: str) -> int:
        return sum(s.abort_open(stream, topic) for s in self._every())

    def compaction_state(self, stream: UUID) -> list:
        return [state for s in self._every() for state in s.compaction_state(stream)]

    def stream_marks(self) -> dict[UUID, tuple]:
        marks: dict[UUID, tuple] = {}
        for store in self._every():  # a change in any group changes the concatenation
            for stream, figures in store.stream_marks().items():
                marks[stream] = (*marks.get(stream, ()), *figures)
        return marks

    def fence_appends(self, stream: UUID, *, timeout: float) -> None:
        for store in self._every():
            store.fence_appends(stream, timeout=timeout)

    def end_link(self, stream: UUID, link: str, *, timeout: float) -> None:
        for store in self._every():
            store.end_link(stream, link, timeout=timeout)

    def reopen_link(self, link: str) -> None:
        for store in self._every():
            store.reopen_link(link)

    def drop_stream(self, stream: UUID) -> None:
        for store in self._every():
            store.drop_stream(stream)
        placement.unplace(self.view(), stream, None)

    def drop_topic(self, stream: UUID, topic: str) -> None:
        for store in self._every():
            with contextlib.suppress(UnknownTopic):
                store.drop_topic(stream, topic)
        placement.unplace(self.view(), stream, topic)

    def group(self) -> Any:
        view = self.view()
        return view.stores[view.home].group()

    def close(self) -> None:  # the stores are shared: replication.stores.close_stores closes them
        pass

    def __getattr__(self, name: str) -> Any:
        raise NotRouted(f"the message store call {name!r} is not routed over store groups yet: "
                        f"cluster {self.cluster} has several groups")


def _append_split(view: placement.View, group_of: dict[int, str], stream: UUID, topic: str,
                  records: Sequence[Record], k: dict, placed: dict[int, tuple[int, int]]
                  ) -> list[tuple[int, int]]:
    """Each group's records in one append there; (partition, offset) of each record. When one
    group's append is refused as NOT_HELD after another's committed, the router tries again:
    the records `placed` holds are stored already and are not sent twice."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(records):
        if i not in placed:
            by_group[group_of[record.partition]].append(i)  # type: ignore[index]
    if len(by_group) == 1 and not placed:  # the common case: one group, one append
        return view.stores[next(iter(by_group))].append(stream, topic, records, **k)
    for group, indexes in by_group.items():
        got = view.stores[group].append(stream, topic, [records[i] for i in indexes], **k)
        placed.update(zip(indexes, got, strict=True))
    return [placed[i] for i in range(len(records))]


def _apply_split(view: placement.View, group_of: dict[int, str], stream: UUID,
                 messages: list[Message], link: str, origin_low: dict | None,
                 done: dict[int, Applied]) -> None:
    """Each group's messages applied there, each group's answer into `done` by partition: a
    retry after a NOT_HELD skips the partitions a group applied already (as _append_split)."""
    by_group: dict[str, list[Message]] = defaultdict(list)
    for m in messages:
        if m.partition not in done:
            by_group[group_of[m.partition]].append(m)
    for name, mine in by_group.items():
        applied = view.stores[name].apply(stream, mine, link=link, origin_low=origin_low)
        done.update(dict.fromkeys({m.partition for m in mine}, applied))
