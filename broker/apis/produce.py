"""Produce (key 0): record batches v2 decoded and appended through the same domain service as
REST produce (messages_append: produceperm, origin, sizes, stream_wake,
replicas_await, counters; invariant 9). acks=0 gets no response; acks=1 and all are answered
once the store committed, and all also once synchronous replicas hold the batch (the service
waits for them whatever acks says: a produce is never acknowledged before they have it).

A request's decode and appends run in one hop to the thread pool; its partitions without an
idempotent producer go in one append (one transaction, one COPY). A connection a quota has
throttled appends in its tenant's lane, one append of that tenant at a time (Session.lane).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from kio.schema.errors import ErrorCode

from broker import errors
from broker.apis.transactions import produce_refusal
from broker.codec import build
from broker.compacted import MESSAGE as KEYLESS
from broker.compacted import RecordErrors, keyless_decoded, keyless_raw
from broker.dispatch import RequestHeader, handles, handles_together, response_class
from broker.notify import data_arrived
from broker.session import Session, forget_connection
from replication.counters import count_refusal
from replication.engine.durability import primary_commit_only
from replication.engine.recordbatch import BatchTooLarge, Budget, CorruptRecord, decode_batches
from replication.engine.sequences import ProducerBatch
from replication.engine.store import now_ms
from replication.engine.stored import RawBatch, check_batches
from replication.quotas import PRODUCE
from replication.services.messages import PartitionWrite, keeps_batches, messages_append
from replication.services.names import ResolvedTopic

OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.out_of_order_sequence_number
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch
INVALID_RECORD = ErrorCode.invalid_record
_NO_TIME = None  # log_append_time -1: the topic keeps the producer's create time


@dataclass(slots=True)
class PartitionAnswer:
    index: int
    code: ErrorCode = errors.NONE
    base_offset: int = -1
    message: str | None = None
    log_append_time: int = -1
    record_errors: RecordErrors | None = None  # Produce v8+: the records that refused it


def error_of(error: Exception) -> tuple[ErrorCode, str]:
    """The Kafka error code an error maps to, and its message: the code its class declares
    (domain errors, sequence errors, the batch decoder's), else a store or control-plane
    outage's retriable code. A domain error's message is its plain text: the problem and what
    to do in words, no command line."""
    code = errors.code_of(error)
    if code is not None:
        return code, str(error)
    if isinstance(error, errors.STORE_UNAVAILABLE):
        return errors.KAFKA_STORAGE_ERROR, f"the message store is unavailable, retry: {error}"
    if isinstance(error, errors.CONTROL_UNAVAILABLE):
        return errors.REQUEST_TIMED_OUT, f"the control plane is unavailable, retry: {error}"
    return errors.UNKNOWN_SERVER_ERROR, f"{type(error).__name__}: {error}"


def _writes(partitions: Any, budget: Budget, keeps_batches: bool = False,
            transactional: bool = False, compact: bool = False,
            ) -> tuple[list[PartitionWrite], list[PartitionAnswer]]:
    """The partitions' batches decoded into writes (an idempotent producer's batch each its
    own write), and answers for those that failed to decode, are over the `budget` or hold
    a keyless record on a `compact` topic. For a store that keeps batches as sent, they are
    checked, not decoded."""
    writes, failed = [], []
    for data in partitions:
        try:
            if keeps_batches:
                checked = check_batches(data.records, budget, transactional=transactional)
                if compact and (keyless := keyless_raw([b.data for b in checked])):
                    failed.append(_keyless(data.index, keyless))
                    continue
                writes += _batch_writes(data.index, checked)
                continue
            batches = decode_batches(data.records, data.index, budget)
        except (CorruptRecord, BatchTooLarge) as error:
            if isinstance(error, BatchTooLarge):
                count_refusal("batch_too_large")
            code, message = error_of(error)
            failed.append(PartitionAnswer(data.index, code, message=message))
            continue
        if compact and (keyless := keyless_decoded([[r.key for r in b.records]
                                                    for b in batches])):
            failed.append(_keyless(data.index, keyless))
            continue
        plain: list = []
        for batch in batches:
            if batch.producer_id >= 0 and batch.base_sequence >= 0:
                writes.append(PartitionWrite(data.index, batch.records, ProducerBatch(
                    batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    len(batch.records))))
            else:
                plain += batch.records
        if plain or not batches:
            writes.append(PartitionWrite(data.index, plain))
    return writes, failed


def _keyless(partition: int, keyless: RecordErrors) -> PartitionAnswer:
    count_refusal("keyless_record_on_compacted_topic")
    return PartitionAnswer(partition, INVALID_RECORD, message=KEYLESS, record_errors=keyless)


def _batch_writes(partition: int, batches: list[RawBatch]) -> list[PartitionWrite]:
    writes, plain = [], []
    for batch in batches:
        if batch.producer_id >= 0 and batch.base_sequence >= 0:
            writes.append(PartitionWrite(partition, [], ProducerBatch(
                batch.producer_id, batch.epoch, batch.base_sequence, batch.records),
                batches=[batch]))
        else:
            plain.append(batch)
    if plain:
        writes.append(PartitionWrite(partition, [], batches=plain))
    return writes


@dataclass(slots=True)
class TopicProduce:
    """One topic of a Produce request: its writes, the answers of partitions refused before
    any append, and once appended (with the same topic's writes of the requests served
    together) the topic or the error that refused it whole."""

    resolved: ResolvedTopic
    writes: list[PartitionWrite]
    answers: list[PartitionAnswer]
    topic: Any = None
    error: Exception | None = None
    stamp: int = -1


def _compacted(resolved: ResolvedTopic) -> bool:
    """Whether the topic's cleanup.policy compacts it (its own, else its stream's)."""
    if resolved.record is None:
        return resolved.stream.compact
    return "compact" in (resolved.record.cleanuppolicy or resolved.stream.cleanuppolicy)


def _prepared(resolved: ResolvedTopic, partitions: Any, budget: Budget,
              transactional: bool) -> TopicProduce:
    writes, answers = _writes(partitions, budget, keeps_batches(resolved.stream), transactional,
                              _compacted(resolved))
    return TopicProduce(resolved, [w for w in writes if w.records or w.batches], answers)


def _append_together(actor: AbstractBaseUser, produces: list[TopicProduce],
                     abandoned: Callable[[], bool] | None) -> None:
    """The writes of one topic's produces in one append (one store transaction for the plain
    batches, in the requests' order), as one request's are."""
    first = produces[0].resolved
    stamp = now_ms()  # a log-append-time topic stamps the batch at about this instant
    try:
        topic = messages_append(actor=actor, stream=first.stream, topic=first.topic,
                                writes=[w for p in produces for w in p.writes],
                                abandoned=abandoned, throttled=True)
    except Exception as error:  # the whole topic refused: every partition says why
        forget_connection(error)
        for p in produces:
            p.error = error
        return
    for p in produces:
        p.topic, p.stamp = topic, stamp


def _answers(produced: TopicProduce) -> list[PartitionAnswer]:
    answers, writes = produced.answers, produced.writes
    if produced.error is not None:
        code, message = error_of(produced.error)
        return answers + [PartitionAnswer(w.partition, code, message=message) for w in writes]
    for w in writes:  # a refusal's traceback holds the records: free them now, not at a GC pass
        if w.error is not None:
            w.error.__traceback__ = None
    append_time = produced.topic.timestamptype == "LOGAPPENDTIME"
    seen: dict[int, PartitionAnswer] = {}
    for w in writes:
        if w.partition in seen:  # several batches of one partition: the first one's offset
            if w.error is not None:
                seen[w.partition].code, seen[w.partition].message = error_of(w.error)
            continue
        answer = seen[w.partition] = PartitionAnswer(w.partition, base_offset=w.base_offset)
        if w.error is not None:
            answer.code, answer.message = error_of(w.error)
            answer.base_offset = -1
        elif append_time:
            answer.log_append_time = produced.stamp
    return answers + list(seen.values())


Topics = list[tuple[ResolvedTopic | None, Any]]


def _kind(produced: TopicProduce) -> str:
    sequenced = {w.sequence is not None for w in produced.writes}
    return "mixed" if len(sequenced) > 1 else "sequenced" if True in sequenced else "plain"


def _join(runs: list[list[TopicProduce]], produced: TopicProduce) -> None:
    """Add a topic's produce to the last run of those appended together, or start one: an
    append stores plain batches before idempotent ones (each in its own transaction), so
    only requests holding one kind join, and a partition keeps the requests' order."""
    kind = _kind(produced)
    if runs and kind != "mixed" and _kind(runs[-1][-1]) == kind:
        runs[-1].append(produced)
    else:
        runs.append([produced])


def produce_request(actor: AbstractBaseUser, topics: Topics,
                    abandoned: Callable[[], bool] = lambda: False, acks: int = -1,
                    transactional: bool = False,
                    ) -> list[list[PartitionAnswer]] | None:
    """The answers to a Produce request (in the thread pool): `produce_requests` of one."""
    answered = produce_requests(actor, [topics], abandoned, acks, transactional)
    return None if answered is None else answered[0]


def produce_requests(actor: AbstractBaseUser, requests: list[Topics],
                     abandoned: Callable[[], bool] = lambda: False, acks: int = -1,
                     transactional: bool = False,
                     ) -> list[list[list[PartitionAnswer]]] | None:
    """The answers to consecutive Produce requests of one connection (in the thread pool),
    committing as `acks` asks: acks=all on the synchronous standby too, acks=0 and 1 on the
    primary alone (replication/engine/durability.py). Each topic's writes of all the
    requests go in one append, a partition's batches in the requests' order, so they share
    one store transaction (one commit) and a refusal of it answers each of them.

    None when the client left before they were written (`abandoned`): the answers could not
    reach it, and librdkafka, which closes the connection when a request times out, retries
    the batches, maybe renumbered under a bumped epoch; written late they would be stored
    twice (invariant 10). Unanswered, they were never acknowledged, so writing nothing is
    what the client was told. Each append checks it again once it holds its partitions (a
    wait for the store is what times out)."""
    rows: list[list[TopicProduce | list[PartitionAnswer]]] = []
    together: dict[tuple[int, str], list[list[TopicProduce]]] = {}
    for topics in requests:
        budget = Budget(settings.KAFKA_MAX_BATCH_BYTES, settings.KAFKA_MAX_REQUEST_BYTES)
        row: list[TopicProduce | list[PartitionAnswer]] = []
        for resolved, data in topics:
            if resolved is None:
                row.append([PartitionAnswer(p.index, errors.UNKNOWN_TOPIC_OR_PARTITION,
                                            message="no such topic, or not visible to you")
                            for p in data.partition_data])
                continue
            produced = _prepared(resolved, data.partition_data, budget, transactional)
            _join(together.setdefault((resolved.stream.pk, resolved.topic), []), produced)
            row.append(produced)
        rows.append(row)
    with primary_commit_only(acks != -1):
        for runs in together.values():
            for produces in runs:
                if abandoned():
                    return None
                _append_together(actor, produces, abandoned)
    return [[x if isinstance(x, list) else _answers(x) for x in row] for row in rows]


def _entry(answer: PartitionAnswer) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": answer.index, "error_code": answer.code,
                             "base_offset": answer.base_offset, "log_start_offset": -1,
                             "error_message": answer.message, "log_append_time": _NO_TIME}
    if answer.record_errors:
        entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": text}
                                  for i, text in answer.record_errors]
    if answer.log_append_time >= 0:
        entry["log_append_time"] = datetime.datetime.fromtimestamp(
            answer.log_append_time / 1000, tz=datetime.UTC)
    return entry


async def _topics_of(session: Session, request: Any) -> Topics:
    if request.acks not in (0, 1, -1):
        raise errors.KafkaError(errors.INVALID_REQUIRED_ACKS,
                                f"acks {request.acks}: use 0, 1 or -1 (all)")
    return [(await session.resolve(t.name, create=True), t) for t in request.topic_data]


@handles(0, 3, 9)
async def produce(session: Session, header: RequestHeader, request: Any) -> Any:
    topics = await _topics_of(session, request)
    transactional = request.transactional_id is not None
    refused = await produce_refusal(session, request, topics) if transactional else None
    if refused is not None:  # KIP-890: not in the producer's ongoing transaction
        answers: list[list[PartitionAnswer]] | None = [
            [PartitionAnswer(p.index, refused[0], message=refused[1]) for p in t.partition_data]
            for _, t in topics]
    else:  # acks=0 expects no answer: its client may close as soon as it has sent the request.
        async with session.lane(_tenants(topics)):
            answers = await session.run_sync(
                produce_request, session.user, topics,
                session.peer_left if request.acks != 0 else lambda: False, request.acks,
                transactional)
    if answers is None or (request.acks != 0 and session.peer_left()):
        session.note("produce_abandoned", reason="the client closed the connection first")
        return None
    return await _respond(session, request, topics, answers)


def _together(requests: list[Any]) -> bool:
    """Whether consecutive Produce requests may be served together: all answered (acks 1 or
    all, the same), none transactional (each must be checked against its transaction)."""
    return (len({r.acks for r in requests}) == 1 and requests[0].acks in (1, -1)
            and all(r.transactional_id is None for r in requests))


@handles_together(0, _together)
async def produce_together(session: Session, requests: list[Any]) -> list[Any]:
    """Consecutive Produce requests of one connection (a client with several in flight, as
    librdkafka's up to 5) served together: their batches appended in one store transaction
    per topic, in the requests' order, and each answered in turn as if served alone (a
    refusal of the shared transaction answers each of them)."""
    topics = [await _topics_of(session, r) for r in requests]
    async with session.lane({t for request in topics for t in _tenants(request)}):
        answers = await session.run_sync(produce_requests, session.user, topics,
                                         session.peer_left, requests[0].acks)
    if answers is None or session.peer_left():
        session.note("produce_abandoned", reason="the client closed the connection first")
        return [None] * len(requests)
    return [await _respond(session, r, t, a)
            for r, t, a in zip(requests, topics, answers, strict=True)]


def _tenants(topics: Topics) -> set[int]:
    return {r.stream.tenant_id for r, _ in topics if r is not None}


async def _respond(session: Session, request: Any, topics: Topics,
                   answers: list[list[PartitionAnswer]]) -> Any:
    await session.throttle_for(_tenants(topics), PRODUCE)
    for (resolved, data), parts in zip(topics, answers, strict=True):
        if resolved is not None and any(a.code == errors.NONE for a in parts):
            data_arrived(resolved.stream.uuid, resolved.topic)
        for a in parts:
            if a.code != errors.NONE:  # once per connection and kind (session.note)
                session.note(f"produce_{a.code.name}", topic=data.name, partition=a.index,
                             message=a.message)
    if request.acks == 0:
        return None
    return build(response_class(request), throttle_time=0, responses=[
        {"name": t.name, "partition_responses": [_entry(a) for a in parts]}
        for (_, t), parts in zip(topics, answers, strict=True)])
