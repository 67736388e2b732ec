"""Kafka transactions (issue 31): InitProducerId with a transactional id, AddPartitionsToTxn
(24), AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28), DescribeTransactions (65) and
ListTransactions (66), through replication/services/transactions.py. Any listener coordinates
any transaction (the state is the control database's), so FindCoordinator for a transaction
answers with a listener as for a group.

Kafka answers PRODUCER_FENCED only to clients new enough to know it (these APIs' v2 up,
InitProducerId v4): older versions get INVALID_PRODUCER_EPOCH, as Kafka's broker does.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import defaultdict
from typing import Any

import structlog
from django.contrib.auth.models import AbstractBaseUser
from kio.schema.errors import ErrorCode

from broker import errors
from broker.background import Background
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Listener, Session, forget_connection
from replication.engine.recordbatch import CorruptRecord, frames
from replication.errors import StreamgateError
from replication.models import KafkaTransaction
from replication.services.names import ResolvedTopic
from replication.services.transactions import (
    TxnProducer,
    txn_add_offsets,
    txn_add_partitions,
    txn_end,
    txn_expire,
    txn_init,
    txn_offset_commit,
    txn_require_partitions,
    txn_visible,
)

log = structlog.get_logger(__name__)
NOT_ATTEMPTED = ErrorCode.operation_not_attempted
TIMEOUT_CHECK_SECONDS = 1.0


def code_for(error: Exception, version: int, fenced_from: int = 2) -> ErrorCode:
    code = errors.code_of(error) or errors.UNKNOWN_SERVER_ERROR
    if code == ErrorCode.producer_fenced and version < fenced_from:
        return ErrorCode.invalid_producer_epoch
    return code


async def _call(session: Session, request: Any, fn: Any, fenced_from: int = 2,
                **kwargs: Any) -> tuple[Any, ErrorCode, str | None]:
    """(result, code, message) of a service call in the thread pool."""
    try:
        return await session.run_sync(fn, actor=session.user, **kwargs), errors.NONE, None
    except StreamgateError as error:
        session.note(f"txn_{type(error).__name__}", message=str(error))
        return None, code_for(error, request.__version__, fenced_from), str(error)


async def init_transactional(session: Session, request: Any) -> Any:
    """InitProducerId's answer for a transactional producer."""
    who = TxnProducer(request.transactional_id, getattr(request, "producer_id", -1),
                      getattr(request, "producer_epoch", -1))
    timeout = int(request.transaction_timeout.total_seconds() * 1000)
    found, code, _ = await _call(session, request, txn_init, 4, who=who, timeout_ms=timeout,
                                 client_id=session.client_id or "")
    pid, epoch = found or (-1, -1)
    return build(response_class(request), throttle_time=0, error_code=code, producer_id=pid,
                 producer_epoch=epoch)


def _who(request: Any, prefix: str = "") -> TxnProducer:
    return TxnProducer(getattr(request, f"{prefix}transactional_id"),
                       getattr(request, f"{prefix}producer_id"),
                       getattr(request, f"{prefix}producer_epoch"))


@handles(24, 0, 3)
async def add_partitions(session: Session, header: RequestHeader, request: Any) -> Any:
    asked = [(t.name, list(t.partitions)) for t in request.v3_and_below_topics]
    resolved = {name: await session.resolve(name) for name, _ in asked}
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    for name, parts in asked:
        for p in parts:
            found = resolved[name]
            if found is None:
                codes[(name, p)] = errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(((found.stream, found.topic, p), (name, p)))
    if not codes:
        problems, code, _ = await _call(session, request, txn_add_partitions,
                                        who=_who(request, "v3_and_below_"),
                                        partitions=[w for w, _ in wanted])
        for (stream, topic, p), key in wanted:
            problem = (problems or {}).get((stream.pk, topic, p))
            codes[key] = code if problems is None else (
                NOT_ATTEMPTED if problem is None and any(problems.values())
                else errors.NONE if problem is None else code_for(problem, request.__version__))
    codes = {k: codes.get(k, NOT_ATTEMPTED) for name, parts in asked for k in
             ((name, p) for p in parts)}
    return build(response_class(request), throttle_time=0, results_by_topic_v3_and_below=[
        {"name": name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": codes[(name, p)]} for p in parts]}
        for name, parts in asked])


@handles(25, 0, 3)
async def add_offsets(session: Session, header: RequestHeader, request: Any) -> Any:
    _, code, _ = await _call(session, request, txn_add_offsets, who=_who(request),
                             group=request.group_id)
    return build(response_class(request), throttle_time=0, error_code=code)


@handles(26, 0, 3)
async def end_txn(session: Session, header: RequestHeader, request: Any) -> Any:
    _, code, _ = await _call(session, request, txn_end, who=_who(request),
                             commit=request.committed)
    return build(response_class(request), throttle_time=0, error_code=code)


@handles(28, 0, 3)
async def txn_offset_commit_api(session: Session, header: RequestHeader, request: Any) -> Any:
    per_stream: dict[int, tuple[ResolvedTopic, list]] = {}
    codes: dict[tuple[str, int], ErrorCode] = {}
    names: dict[tuple[int, str], str] = {}
    for t in request.topics:
        found = await session.resolve(t.name)
        for p in t.partitions:
            if found is None:
                codes[(t.name, p.partition_index)] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            names[(found.stream.pk, found.topic)] = t.name
            per_stream.setdefault(found.stream.pk, (found, []))[1].append(
                (found.topic, p.partition_index, p.committed_offset, p.committed_metadata or "",
                 getattr(p, "committed_leader_epoch", -1)))  # v2 and later carry it
    for pk, (found, commits) in per_stream.items():
        results, code, _ = await _call(session, request, txn_offset_commit, who=_who(request),
                                       group=request.group_id, stream=found.stream,
                                       commits=commits)
        for topic, p, *_ in commits:
            problem = (results or {}).get((topic, p))
            codes[(names[(pk, topic)], p)] = code if results is None else (
                errors.NONE if problem is None else code_for(problem, request.__version__))
    return build(response_class(request), throttle_time=0, topics=[
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, p.partition_index)]}
                                        for p in t.partitions]}
        for t in request.topics])


def _described(actor: AbstractBaseUser, ids: list[str]) -> list[dict[str, Any]]:
    found = {t.transactional_id: t for t in txn_visible(actor=actor, ids=ids)}
    out = []
    for tid in ids:
        txn = found.get(tid)
        if txn is None:
            out.append({"error_code": ErrorCode.transactional_id_not_found,
                        "transactional_id": tid, "transaction_state": "", "producer_id": -1,
                        "producer_epoch": -1, "transaction_timeout": datetime.timedelta(0),
                        "transaction_start_time": _ms(None), "topics": []})
            continue
        topics: dict[str, list[int]] = defaultdict(list)
        for _, topic, p in txn.partitions:
            topics[topic].append(p)
        out.append({"error_code": errors.NONE, "transactional_id": tid,
                    "transaction_state": txn.state, "producer_id": txn.producer_id,
                    "producer_epoch": txn.epoch,
                    "transaction_timeout": datetime.timedelta(milliseconds=txn.timeout_ms),
                    "transaction_start_time": _ms(txn.started),
                    "topics": [{"topic": k, "partitions": v} for k, v in topics.items()]})
    return out


def _ms(when: datetime.datetime | None) -> datetime.datetime:
    # No start (not found, or not begun): the epoch, not Kafka's -1, which kio cannot write
    # back for every client library that decodes with it; clients ignore it then.
    return when or datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


@handles(65, 0, 0)
async def describe_transactions(session: Session, header: RequestHeader, request: Any) -> Any:
    states = await session.run_sync(_described, session.user, list(request.transactional_ids))
    return build(response_class(request), throttle_time=0, transaction_states=states)


def _listed(actor: AbstractBaseUser, states: list[str], pids: list[int]) -> list[KafkaTransaction]:
    return [t for t in txn_visible(actor=actor)
            if (not states or t.state in states) and (not pids or t.producer_id in pids)]


@handles(66, 0, 1)
async def list_transactions(session: Session, header: RequestHeader, request: Any) -> Any:
    states, pids = list(request.state_filters), list(request.producer_id_filters)
    found = await session.run_sync(_listed, session.user, states, pids)
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
             "CompleteAbort", "PrepareEpochFence", "Dead"}
    return build(response_class(request), throttle_time=0, error_code=errors.NONE,
                 unknown_state_filters=[s for s in states if s not in known],
                 transaction_states=[{"transactional_id": t.transactional_id,
                                      "producer_id": t.producer_id,
                                      "transaction_state": t.state} for t in found])


async def produce_refusal(session: Session, request: Any,
                          topics: list[tuple[ResolvedTopic | None, Any]],
                          ) -> tuple[ErrorCode, str | None] | None:
    """A transactional Produce's refusal (code, message), None when its producer is current
    and every partition is in its ongoing transaction (KIP-890's server-side defence). A
    fenced producer gets INVALID_PRODUCER_EPOCH, Produce's code for it."""
    try:
        first = next(p.records for _, t in topics for p in t.partition_data if p.records)
        head = next(frames(first))[3]
    except (StopIteration, CorruptRecord) as error:
        return ErrorCode.corrupt_message, f"no readable record batch: {error}"
    keys = [(r.stream.pk, r.topic, p.index) for r, t in topics if r for p in t.partition_data]
    _, code, message = await _call(session, request, txn_require_partitions, 99,
                                   who=TxnProducer(request.transactional_id, head[9], head[10]),
                                   partitions=keys)
    return None if code == errors.NONE else (code, message)


class TransactionTimeouts(Background):
    """Every TIMEOUT_CHECK_SECONDS, a listener aborts the transactions past their timeout and
    completes those decided by a listener that died (any listener may: txn_expire)."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TIMEOUT_CHECK_SECONDS)
            try:
                await loop.run_in_executor(self.listener.executor, _expire)
            except Exception as error:  # the database restarting: check again next time
                log.warning("kafka_txn_expire_failed", error=str(error))


def _expire() -> int:
    try:
        return txn_expire()
    except Exception as error:
        forget_connection(error)
        raise
