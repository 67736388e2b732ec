"""Kafka's transaction coordinator (issue 31, KIP-98/447/890), its state in the control
database (KafkaTransaction) so whichever listener is asked carries on a transaction another
left: InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, timeouts, and the checks a transactional produce passes.

No control-plane lock is held across a store call (invariant 14): a transaction's end is
decided under its row's lock (the Prepare* state, saved), the markers and offsets are written
after it, and the row completed under the lock again. Completing twice (a listener killed
after some markers, another taking over; two at once) writes nothing twice: a store writes a
partition's marker only while the producer's range there is open (engine/txnstate.py).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

import structlog
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Membership
from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore
from replication.engine.txnstate import MarkerAt
from replication.errors import InvalidInput, StreamgateError
from replication.grants import grants_require
from replication.models import KafkaProducerId, KafkaTransaction, Stream, Topic, TxnState
from replication.services.cursors import check_group, cursors_check
from replication.services.wakeups import cursors_wake
from replication.stores import store_for

log = structlog.get_logger(__name__)
MAX_EPOCH = 32766
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default (15 minutes)
TAKE_OVER_SECONDS = 5.0  # a decided transaction left this long is completed by another
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
PartitionKey = tuple[int, str, int]  # (stream id, topic, partition)


class TxnIdRefused(StreamgateError, http_status=403,
                   kafka_error="transactional_id_authorization_failed"):
    pass


class TxnFenced(StreamgateError, kafka_error="producer_fenced"):
    pass


class TxnWrongProducer(StreamgateError, kafka_error="invalid_producer_id_mapping"):
    pass


class TxnBusy(StreamgateError, kafka_error="concurrent_transactions"):
    pass


class TxnNotOngoing(StreamgateError, kafka_error="invalid_txn_state"):
    pass


class TxnBadId(InvalidInput, kafka_error="invalid_request"):
    pass


class TxnTimeout(InvalidInput, kafka_error="invalid_transaction_timeout"):
    pass


@dataclass(frozen=True)
class TxnProducer:
    """Who speaks for a transaction in a request: its id, producer id and epoch."""

    transactional_id: str
    producer_id: int
    epoch: int


def _tenant_of(actor: AbstractBaseUser) -> int | None:
    """The tenant a user's transactional ids belong to: their first, as for group ids."""
    return Membership.objects.filter(user=actor).order_by("tenant_id").values_list(
        "tenant_id", flat=True).first()


def _owned(actor: AbstractBaseUser, transactional_id: str, *, lock: bool = True,
           ) -> KafkaTransaction | None:
    """The id's row (locked till the commit), refused when another tenant's."""
    if not transactional_id or len(transactional_id) > 255 or \
            not transactional_id.isprintable():
        raise TxnBadId("a transactional id is 1-255 printable characters",
                       field="transactional_id")
    rows = KafkaTransaction.objects.filter(transactional_id=transactional_id)
    txn = (rows.select_for_update() if lock else rows).first()
    if txn is not None and txn.tenant_id != _tenant_of(actor):
        raise TxnIdRefused(f"transactional id {transactional_id!r} belongs to another tenant: "
                           "choose another transactional.id")
    return txn


def _current(actor: AbstractBaseUser, who: TxnProducer, *, lock: bool = True,
             ) -> KafkaTransaction:
    """The row of the producer that sends this, refused when fenced by a newer epoch."""
    txn = _owned(actor, who.transactional_id, lock=lock)
    if txn is None:
        raise TxnWrongProducer(f"transactional id {who.transactional_id!r} has no producer: "
                               "call init_transactions first")
    if txn.producer_id != who.producer_id:
        raise TxnWrongProducer(f"producer id {who.producer_id} is not the one of "
                               f"{who.transactional_id!r}: call init_transactions again")
    if txn.epoch != who.epoch:
        raise TxnFenced(f"producer epoch {who.epoch} of {who.transactional_id!r} is fenced by "
                        f"epoch {txn.epoch}: another producer with this transactional.id took "
                        "over, or the transaction timed out")
    return txn


def txn_init(*, actor: AbstractBaseUser, who: TxnProducer, timeout_ms: int,
             client_id: str = "") -> tuple[int, int]:
    """InitProducerId with a transactional id: a new producer id, or the id's with its epoch
    bumped (fencing the previous producer), once its open transaction is aborted and any
    decided one completed. (producer id, epoch)."""
    if not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise TxnTimeout(f"transaction.timeout.ms {timeout_ms}: use 1 to {MAX_TIMEOUT_MS}")
    tenant = _tenant_of(actor)
    if tenant is None:
        raise TxnIdRefused("a transactional id belongs to a tenant, and your user is in none: "
                           "ask an administrator to add you to one")
    _require_batch_stores(tenant)
    for _ in range(3):
        with transaction.atomic():
            txn = _owned(actor, who.transactional_id)
            if txn is None:
                pid = KafkaProducerId.objects.create(user=actor, client_id=client_id[:255]).pk
                KafkaTransaction.objects.create(transactional_id=who.transactional_id,
                                                tenant_id=tenant, producer_id=pid,
                                                timeout_ms=timeout_ms)
                return pid, 0
            if who.producer_id >= 0 and (who.producer_id, who.epoch) != (
                    txn.producer_id, txn.epoch):
                raise TxnFenced(f"producer {who.producer_id} epoch {who.epoch} is not the "
                                f"current producer of {who.transactional_id!r}")
            if txn.state not in PREPARED and txn.state != TxnState.ONGOING:
                return _bumped(txn, actor, client_id, timeout_ms)
            if txn.state == TxnState.ONGOING:
                _decide(txn, commit=False, bump=True)
        _complete(txn)
    raise TxnBusy(f"transaction {who.transactional_id!r} is completing: retry")


def _require_batch_stores(tenant: int) -> None:
    """A tenant whose streams all live on row stores is refused at once, as before
    transactions existed (a partition on a row store is refused when added, too)."""
    clusters = {s.cluster for s in Stream.objects.filter(tenant_id=tenant).select_related(
        "cluster")}
    if clusters and not any(store_for(c).KEEPS_BATCHES for c in clusters):
        raise TxnIdRefused("your streams' message stores keep rows, and transactions need the "
                           "batch layout: an operator runs `manage.py convertstores` "
                           "(docs/operations.md)")


def _bumped(txn: KafkaTransaction, actor: AbstractBaseUser, client_id: str,
            timeout_ms: int) -> tuple[int, int]:
    if txn.epoch + 1 >= MAX_EPOCH:  # the epoch space is spent: a new producer id, as Kafka
        txn.producer_id = KafkaProducerId.objects.create(user=actor,
                                                         client_id=client_id[:255]).pk
        txn.epoch = 0
    else:
        txn.epoch += 1
    txn.state, txn.timeout_ms, txn.started = TxnState.EMPTY, timeout_ms, None
    txn.partitions, txn.offsets, txn.groups = [], [], []
    txn.save()
    return txn.producer_id, txn.epoch


def _decide(txn: KafkaTransaction, *, commit: bool, bump: bool = False) -> None:
    """The decision, saved before any marker is written (under the row's lock). An abort the
    producer did not ask for (timeout, a new producer) bumps the epoch: the old one is fenced."""
    txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if bump and txn.epoch + 1 < MAX_EPOCH:
        txn.epoch += 1
    txn.save()


def _begin(txn: KafkaTransaction) -> None:
    if txn.state in PREPARED:
        raise TxnBusy(f"transaction {txn.transactional_id!r} is completing: retry")
    if txn.state != TxnState.ONGOING:
        txn.state, txn.started = TxnState.ONGOING, timezone.now()
        txn.partitions, txn.offsets, txn.groups = [], [], []


def txn_add_partitions(*, actor: AbstractBaseUser, who: TxnProducer,
                       partitions: Sequence[tuple[Stream, str, int]],
                       ) -> dict[PartitionKey, StreamgateError | None]:
    """AddPartitionsToTxn: each partition needs produceperm and a store that keeps batches;
    any refused, none is added (Kafka answers the others OPERATION_NOT_ATTEMPTED)."""
    problems: dict[PartitionKey, StreamgateError | None] = {}
    for stream, topic, partition in partitions:
        problems[(stream.pk, topic, partition)] = _addable(actor, stream, topic, partition)
    if any(problems.values()):
        return problems
    with transaction.atomic():
        txn = _current(actor, who)
        _begin(txn)
        have = {tuple(p) for p in txn.partitions}
        txn.partitions += [list(k) for k in problems if k not in have]
        txn.save()
    return problems


def _addable(actor: AbstractBaseUser, stream: Stream, topic: str,
             partition: int) -> StreamgateError | None:
    try:
        grants_require(actor, stream, "produceperm", action="produce")
    except StreamgateError as problem:
        return problem
    if not store_for(stream.cluster).KEEPS_BATCHES:
        return TxnIdRefused(f"{stream.path}: its cluster's message store keeps rows, and "
                            "transactions need the batch layout: an operator runs `manage.py "
                            "convertstores` (docs/operations.md)")
    return None


def txn_add_offsets(*, actor: AbstractBaseUser, who: TxnProducer, group: str) -> None:
    """AddOffsetsToTxn: the group's offsets will be committed with the transaction."""
    check_group(group)
    with transaction.atomic():
        txn = _current(actor, who)
        _begin(txn)
        if group not in txn.groups:
            txn.groups.append(group)
        txn.save()


def txn_offset_commit(*, actor: AbstractBaseUser, who: TxnProducer, group: str, stream: Stream,
                      commits: Sequence[tuple[str, int, int, str]
                                        | tuple[str, int, int, str, int]],
                      ) -> dict[tuple[str, int], StreamgateError | None]:
    """TxnOffsetCommit: (topic, partition, offset, metadata, leader epoch) checked now
    (consumeperm, partition, offset), written only when the transaction commits."""
    results = cursors_check(actor=actor, stream=stream, group=group, commits=commits)
    for topic, partition, _, metadata, *_ in commits:
        if "\x00" in metadata:  # the control database's JSON cannot keep it
            results[(topic, partition)] = InvalidInput(
                "commit metadata with a NUL character: send text", field="metadata")
    good = [c for c in commits if results[(c[0], c[1])] is None]
    with transaction.atomic():
        txn = _current(actor, who)
        if txn.state != TxnState.ONGOING or group not in txn.groups:
            raise TxnNotOngoing(f"group {group!r} is not in the transaction: call "
                            "send_offsets_to_transaction within a transaction")
        txn.offsets += [[stream.pk, group, *commit] for commit in good]
        txn.save()
    return results


def txn_end(*, actor: AbstractBaseUser, who: TxnProducer, commit: bool) -> None:
    """EndTxn: decide, then write the markers and (on commit) the offsets. A retried EndTxn of
    a transaction already decided the same way succeeds again."""
    with transaction.atomic():
        txn = _current(actor, who)
        done = {TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT} if commit else {
            TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT}
        if txn.state == TxnState.ONGOING:
            _decide(txn, commit=commit)
        elif txn.state not in done:
            raise TxnNotOngoing(f"transaction {who.transactional_id!r} is {txn.state}: "
                            f"{'commit' if commit else 'abort'} needs an ongoing transaction")
    _complete(txn)


def txn_complete(*, pk: int) -> None:
    """Write a decided transaction's markers and (commit) offsets, then mark it complete."""
    txn = KafkaTransaction.objects.filter(pk=pk).first()
    if txn is not None:
        _complete(txn)


def _complete(txn: KafkaTransaction) -> None:
    """The markers and (commit) offsets of a decided transaction, one store transaction per
    store, then the row completed. The completion's commit does not wait for the disk: lost
    in a crash, the row stays decided and is completed again (txn_expire), which writes no
    marker twice and the same offsets."""
    if txn.state not in PREPARED:
        return
    commit = txn.state == TxnState.PREPARE_COMMIT
    streams = Stream.objects.select_related("cluster").in_bulk(
        {p[0] for p in txn.partitions} | {o[0] for o in txn.offsets})
    for store, (partitions, cursors) in _per_store(streams, txn, commit).items():
        store.write_markers(partitions, producer_id=txn.producer_id, epoch=txn.epoch,
                            commit=commit, cursors=cursors)
    for stream_pk in {o[0] for o in txn.offsets} if commit else ():
        if stream_pk in streams:
            cursors_wake(stream=streams[stream_pk].uuid)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit = off")
        KafkaTransaction.objects.filter(pk=txn.pk, state=txn.state, epoch=txn.epoch).update(
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=[], offsets=[], groups=[], started=None, updated=timezone.now())


StoreWork = tuple[list[MarkerAt], list[tuple[UUID, str, list[tuple]]]]


def _per_store(streams: dict[int, Stream], txn: KafkaTransaction,
               commit: bool) -> dict[MessageStore, StoreWork]:
    """The transaction's markers and (commit) offsets grouped by the store that keeps them.
    A stream gone meanwhile has nothing left to mark."""
    work: dict[MessageStore, StoreWork] = {}
    for stream_pk, topic, partition in txn.partitions:
        stream = streams.get(stream_pk)
        if stream is not None:
            work.setdefault(store_for(stream.cluster), ([], []))[0].append(
                (stream.uuid, topic, partition))
    per: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    # A transaction saved before epochs were kept has none: -1.
    for stream_pk, group, topic, partition, offset, metadata, *epoch in \
            txn.offsets if commit else ():
        per[(stream_pk, group)].append((topic, partition, offset, metadata, *(epoch or [-1])))
    for (stream_pk, group), rows in per.items():
        stream = streams.get(stream_pk)
        if stream is not None:
            work.setdefault(store_for(stream.cluster), ([], []))[1].append(
                (stream.uuid, group, rows))
    return work


def txn_expire(*, now: datetime.datetime | None = None) -> int:
    """Abort transactions past their timeout (the epoch bumped: their producer is fenced) and
    complete those a listener decided and left; how many were finished."""
    now = now or timezone.now()
    stale = now - datetime.timedelta(seconds=TAKE_OVER_SECONDS)
    todo = list(KafkaTransaction.objects.filter(state__in=PREPARED, updated__lt=stale)
                .values_list("pk", flat=True))
    for txn in KafkaTransaction.objects.filter(state=TxnState.ONGOING):
        if txn.started + datetime.timedelta(milliseconds=txn.timeout_ms) < now:
            with transaction.atomic():
                row = KafkaTransaction.objects.select_for_update().get(pk=txn.pk)
                if row.state == TxnState.ONGOING and row.started == txn.started:
                    _decide(row, commit=False, bump=True)
                    todo.append(row.pk)
    for pk in todo:
        txn_complete(pk=pk)
    return len(todo)


def txn_require_partitions(*, actor: AbstractBaseUser, who: TxnProducer,
                           partitions: Sequence[PartitionKey]) -> None:
    """A transactional produce (KIP-890's server-side defence): its producer current, its
    transaction ongoing, every partition added to it first."""
    txn = _current(actor, who, lock=False)
    have = {tuple(p) for p in txn.partitions}
    missing = [p for p in partitions if p not in have]
    if txn.state != TxnState.ONGOING or missing:
        raise TxnNotOngoing(f"partition {missing[0][1:] if missing else ''} is not in an ongoing "
                        f"transaction of {who.transactional_id!r}: the producer adds each "
                        "partition (AddPartitionsToTxn) before producing to it")


def txn_visible(*, actor: AbstractBaseUser, ids: Sequence[str] | None = None,
                ) -> list[KafkaTransaction]:
    """The transactions of the user's tenant (DescribeTransactions, ListTransactions): another
    tenant's are not even confirmed."""
    rows = KafkaTransaction.objects.filter(tenant_id=_tenant_of(actor))
    return list(rows if ids is None else rows.filter(transactional_id__in=ids))


@dataclass(frozen=True)
class PartitionTxns:
    """A partition's last stable offset and its open transactions (producer id, first offset,
    and the transactional id when it is the stream's tenant's)."""

    partition: int
    last_stable_offset: int
    open: list[tuple[int, int, str | None]]


def topic_transactions(*, topic: Topic) -> list[PartitionTxns]:
    """What `stream topic info` and the API show of a topic's transactions (the caller has
    checked the user may see the topic)."""
    store = store_for(topic.stream.cluster)
    try:
        marks = store.watermarks(topic.stream.uuid, topic.name)
    except UnknownTopic:  # nothing produced yet: the store has not heard of the topic
        marks = {}
    opened: dict[int, list[tuple[int, int]]] = {}
    if store.KEEPS_BATCHES and marks:
        opened = store.open_transactions(  # type: ignore[attr-defined]
            topic.stream.uuid, topic.name, sorted(marks))
    pids = {pid for ranges in opened.values() for pid, _ in ranges}
    names = dict(KafkaTransaction.objects.filter(
        producer_id__in=pids, tenant_id=topic.stream.tenant_id).values_list(
        "producer_id", "transactional_id"))
    return [PartitionTxns(p, min([f for _, f in opened.get(p, [])], default=marks.get(
        p, (0, 0))[1]), [(pid, first, names.get(pid)) for pid, first in opened.get(p, [])])
        for p in range(topic.partitions)]


def txn_abort_promoted(*, stream: Stream, topics: Sequence[str]) -> int:
    """After a failover: the transactions left open in the promoted stream's topics are
    aborted there (their coordinator wrote to the old origin, which no longer feeds it), so
    its read_committed consumers are not held at them for ever. A store that does not answer
    is logged: the failover stands."""
    store = store_for(stream.cluster)
    if not store.KEEPS_BATCHES:
        return 0
    aborted = 0
    for topic in topics:
        try:
            aborted += store.abort_open(stream.uuid, topic)  # type: ignore[attr-defined]
        except UnknownTopic:
            continue  # nothing of it reached the replica
        except Exception as error:
            log.warning("txn_abort_promoted_failed", stream=stream.path, topic=topic,
                        error=str(error))
    return aborted
