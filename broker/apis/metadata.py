"""Metadata (key 3): the live listeners as brokers, and each topic's partitions with their
leaders spread over them.

Leadership is rendezvous hashing of (stream, topic, partition) over the live node ids: it is
the same on every listener that sees the same live set, a listener alone leads everything,
and when one dies only the partitions it led move (within the presence TTL)."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from broker import errors
from broker.codec import Spliced, build, encode, item_class
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Node, Session
from replication.errors import PlanLimitExceeded, StreamgateError
from replication.models import Topic
from replication.names import parse_topic_name
from replication.services.names import ResolvedTopic

CLUSTER_ID = "streamgate"
NO_OPERATIONS = -(2**31)  # "not requested" (INT32_MIN), as Kafka answers without the flag
PERMS = ("produceperm", "consumeperm", "topicperm", "adminperm")  # MapR's topic list rule
# Kafka's AclOperation codes a holder of each permission may perform on a topic.
DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE = 8, 10, 12
OPERATIONS = {"consumeperm": (3,), "produceperm": (4,), "topicperm": (5, 6, 7, 11)}
# What every signed-in user may do on the cluster (KIP-430's cluster_authorized_operations):
# describe it and the listeners' configs, and produce idempotently (InitProducerId is anyone's).
# Creating topics is decided per stream (topicperm); nobody alters anything cluster-wide.
CLUSTER_OPERATIONS = sum(1 << code for code in (DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE))


def operations_of(held: frozenset[str]) -> int:
    """The topic_authorized_operations bit field for a user holding `held` (KIP-430)."""
    codes = {DESCRIBE, DESCRIBE_CONFIGS} | {c for p in held for c in OPERATIONS.get(p, ())}
    return sum(1 << code for code in codes)


def leader_of(key: str, partition: int, nodes: list[Node]) -> int:
    """The node leading `partition` of the topic `key` among `nodes` (sorted, not empty)."""
    return max(nodes, key=lambda n: zlib.crc32(f"{key}/{partition}@{n.node_id}".encode())).node_id


def key_of(stream_uuid: uuid.UUID, topic: str) -> str:
    """What leadership hashes a topic by (its partitions' leaders depend on nothing else)."""
    return f"{stream_uuid}:{topic}"


def topic_key(resolved: ResolvedTopic) -> str:
    return key_of(resolved.stream.uuid, resolved.topic)


def topic_id(record: Topic | None) -> uuid.UUID:
    if record is None:
        return uuid.UUID(int=0)
    return uuid.uuid5(record.stream.uuid, f"{record.name}#{record.pk}")


# A topic's partition entries by (key, partitions, live node ids): they change only with those,
# so a Metadata for every topic of a big cluster (issue 33: 100,000 partitions) hashes each
# partition once per live set, not once per request. Dropped whole when it grows past the bound.
_PARTITIONS: dict[tuple[str, int, tuple[int, ...]], list[dict[str, Any]]] = {}
PARTITIONS_CACHED = 50_000  # topics


def partitions_of(resolved: ResolvedTopic, nodes: list[Node]) -> list[dict[str, Any]]:
    """The topic's partition entries (shared between answers: never changed once made)."""
    key = topic_key(resolved)
    cache_key = (key, resolved.partitions, tuple(n.node_id for n in nodes))
    cached = _PARTITIONS.get(cache_key)
    if cached is not None:
        return cached
    out = []
    for index in range(resolved.partitions):
        # One live listener leads everything: no hashing needed.
        leader = nodes[0].node_id if len(nodes) == 1 else leader_of(key, index, nodes)
        out.append({"partition_index": index, "leader_id": leader, "leader_epoch": -1,
                    "replica_nodes": [leader], "isr_nodes": [leader]})
    if len(_PARTITIONS) >= PARTITIONS_CACHED:
        _PARTITIONS.clear()
    _PARTITIONS[cache_key] = out
    return out


def topic_entry(name: str | None, code: errors.ErrorCode = errors.NONE, *,
                resolved: ResolvedTopic | None = None, nodes: list[Node] | None = None) -> dict:
    entry: dict[str, Any] = {"error_code": code, "name": name, "is_internal": False,
                             "topic_id": uuid.UUID(int=0),
                             "topic_authorized_operations": NO_OPERATIONS}
    if resolved is not None and nodes:
        entry["topic_id"] = topic_id(resolved.record)
        entry["partitions"] = partitions_of(resolved, nodes)
    return entry


# A topic's encoded entry by everything it is made of (the entity class is the version's):
# a Metadata for every topic (issue 33: 10,000 topics, 100,000 partitions) then encodes only
# what changed since the last one, and copies the rest. Dropped whole past the bound.
_ENCODED: dict[tuple, bytes] = {}
ENCODED_CACHED = 50_000  # topic entries
# The placeholder item a spliced answer is encoded around (broker/codec.py Spliced).
MARKER = f"streamgate-splice-{uuid.uuid4()}"


def encoded_entry(cls: type, resolved: ResolvedTopic, nodes: list[Node], operations: int) -> bytes:
    """The bytes of `resolved`'s topic entry as entity `cls` encodes it."""
    record = resolved.record
    key = (cls, resolved.client_name, topic_key(resolved), record.pk if record else None,
           resolved.partitions, tuple(n.node_id for n in nodes), operations)
    found = _ENCODED.get(key)
    if found is None:
        entry = topic_entry(resolved.client_name, resolved=resolved, nodes=nodes)
        entry["topic_authorized_operations"] = operations
        found = encode(build(cls, **entry))
        if len(_ENCODED) >= ENCODED_CACHED:
            _ENCODED.clear()
        _ENCODED[key] = found
    return found


@dataclass
class Describer:
    """Answers for named topics (ACE results cached by the session)."""

    session: Session
    create: bool
    nodes: list[Node]

    operations: bool = False  # include_topic_authorized_operations

    async def perms_held(self, resolved: ResolvedTopic) -> frozenset[str]:
        return await self.session.perms(resolved.stream) & frozenset(PERMS)

    async def operations_on(self, resolved: ResolvedTopic) -> int:
        """The topic_authorized_operations to answer (NO_OPERATIONS unless asked for)."""
        if not self.operations:
            return NO_OPERATIONS
        return operations_of(await self.perms_held(resolved))

    async def entry(self, name: str) -> dict[str, Any]:
        try:
            parse_topic_name(name)
        except StreamgateError:
            return topic_entry(name, errors.INVALID_TOPIC_EXCEPTION)
        try:
            resolved = await self.session.resolve(name, create=self.create)
        except PlanLimitExceeded as error:
            # Auto-creation the tenant's plan refuses: the topic's own error, as Kafka answers
            # a creation its policy refused, rather than failing the whole request.
            return topic_entry(name, errors.code_of(error) or errors.POLICY_VIOLATION)
        if resolved is None and self.session.unplaceable(name):
            # Not a topic that may appear later (UNKNOWN_TOPIC_OR_PARTITION keeps clients
            # waiting for it): a plain name with no default stream cannot be placed until one
            # is set, so clients fail at once (librdkafka: "Broker: Invalid topic").
            return topic_entry(name, errors.INVALID_TOPIC_EXCEPTION)
        if resolved is None:
            return topic_entry(name, errors.UNKNOWN_TOPIC_OR_PARTITION)
        held = await self.perms_held(resolved)
        if not held:
            return topic_entry(name, errors.TOPIC_AUTHORIZATION_FAILED)
        entry = topic_entry(name, resolved=resolved, nodes=self.nodes)
        if self.operations:
            entry["topic_authorized_operations"] = operations_of(held)
        return entry


def _every_topic(request: Any) -> bool:
    """Whether every topic is asked for (v0: an empty list; v1+: null)."""
    return request.topics is None or (request.__version__ == 0 and not request.topics)


async def _listing(describer: Describer) -> list[ResolvedTopic]:
    return await describer.session.listing(PERMS)


async def _asked(describer: Describer, request: Any) -> list[dict[str, Any]]:
    """The topics asked for by name, or by id (v10+ with a null name: a KIP-848 consumer
    learning the names of the topic ids it was assigned)."""
    entries, by_id = [], None
    for asked in request.topics:
        if asked.name is not None:
            entries.append(await describer.entry(asked.name))
            continue
        if by_id is None:
            by_id = {e["topic_id"]: e for e in await _all_topics(describer)}
        # A topic's name is nullable from v12 on: before, an unknown id is named "".
        unknown = None if request.__version__ >= 12 else ""
        entries.append(by_id.get(asked.topic_id) or {
            **topic_entry(unknown, errors.ErrorCode.unknown_topic_id), "topic_id": asked.topic_id})
    return entries


async def _every_topic_encoded(describer: Describer, cls: type) -> list[bytes]:
    """Every listed topic's entry, encoded as entity `cls` (the version's topic entity)."""
    return [encoded_entry(cls, resolved, describer.nodes, await describer.operations_on(resolved))
            for resolved in await _listing(describer)]


async def _all_topics(describer: Describer) -> list[dict[str, Any]]:
    entries = []
    for resolved in await _listing(describer):
        entry = topic_entry(resolved.client_name, resolved=resolved, nodes=describer.nodes)
        entry["topic_authorized_operations"] = await describer.operations_on(resolved)
        entries.append(entry)
    return entries


@handles(3, 0, 12)
async def metadata(session: Session, header: RequestHeader, request: Any) -> Any:
    nodes = session.listener.live_nodes()
    create = bool(getattr(request, "allow_auto_topic_creation", request.__version__ < 4))
    operations = bool(getattr(request, "include_topic_authorized_operations", False))
    describer = Describer(session, create, nodes, operations)
    cls = response_class(request)
    brokers = [{"node_id": n.node_id, "host": n.host, "port": n.port} for n in nodes]
    cluster_operations = (CLUSTER_OPERATIONS if getattr(
        request, "include_cluster_authorized_operations", False) else NO_OPERATIONS)
    answer = {"throttle_time": 0, "brokers": brokers, "cluster_id": CLUSTER_ID,
              "controller_id": nodes[0].node_id,
              "cluster_authorized_operations": cluster_operations}
    if not _every_topic(request):
        return build(cls, topics=await _asked(describer, request), **answer)
    # Every topic: each topic's entry encoded once, copied into every later answer.
    topic_cls = item_class(cls, "topics")
    marker = build(topic_cls, **topic_entry(MARKER))
    return Spliced(build(cls, topics=[marker], **answer), marker,
                   await _every_topic_encoded(describer, topic_cls))
