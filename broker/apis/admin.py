"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37), through the same topic
services as every other interface (topicperm checked there). Configs are in configs.py."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from broker import errors
from broker.apis.assignments import check_new_partitions, check_new_topic
from broker.apis.metadata import key_of, topic_id
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.session import Node, Session
from broker.topicconfig import config_entries, create_settings, topic_configs
from replication.errors import (
    InvalidInput,
    StreamgateError,
)
from replication.models import Stream, Topic
from replication.names import parse_topic_name
from replication.services.topics import topic_create, topic_delete, topic_edit

FIELD_CODES = {"partitions": errors.INVALID_PARTITIONS, "configs": errors.INVALID_CONFIG,
               "topic": errors.INVALID_TOPIC_EXCEPTION,
               "replication": errors.INVALID_REPLICATION_FACTOR,
               # the settings compaction configs map onto (broker/topicconfig.py)
               **dict.fromkeys(("compact", "cleanuppolicy", "mincompactionlag",
                                "deleteretention", "mincleanabledirtyratio"),
                               errors.INVALID_CONFIG)}


def code_for(error: StreamgateError) -> errors.ErrorCode:
    """The Kafka error code for a domain refusal (its message goes along): its class's, or for
    refused input its field's."""
    if error.kafka_error == InvalidInput.kafka_error:
        return FIELD_CODES.get(error.field or "", errors.INVALID_REQUEST)
    return errors.ErrorCode[error.kafka_error]


async def target(session: Session, name: str) -> tuple[Stream, str]:
    """The stream holding topic `name` as the client named it (made or not yet)."""
    try:
        parse_topic_name(name)
    except StreamgateError as error:
        raise KafkaError(errors.INVALID_TOPIC_EXCEPTION, error.desc) from error
    found = await session.target(name)
    if found is None:
        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                         f"no stream of yours holds {name}: use /mapr/<cluster>/<stream>:<topic> "
                         "of a stream you can see, or set a default stream for plain names")
    return found


async def _each(session: Session, name: str, call: Any, *args: Any) -> dict[str, Any]:
    """Run `call(actor, stream, topic, *args)` for topic `name`; its result (a dict) or the
    Kafka error fields."""
    try:
        stream, topic = await target(session, name)
        result = await session.run_sync(call, session.user, stream, topic, *args)
    except KafkaError as error:
        return {"name": name, "error_code": error.code, "error_message": error.message}
    except StreamgateError as error:
        return {"name": name, "error_code": code_for(error), "error_message": error.desc}
    finally:
        session.forget(name)
    return {"name": name, **result}


def validating(validate_only: bool) -> None:
    """Inside the request's transaction: a validate_only request changes nothing."""
    if validate_only:
        transaction.set_rollback(True)


@transaction.atomic
def create_one(actor: AbstractBaseUser, stream: Stream, name: str, spec: Any,
               validate_only: bool, nodes: list[Node]) -> dict[str, Any]:
    if spec.replication_factor not in (-1, 1):
        raise InvalidInput(f"replication factor {spec.replication_factor}: a stream's store "
                           "keeps each message once per cluster; give 1 or -1 and replicate "
                           "streams to other clusters instead", field="replication")
    assigned = check_new_topic(key_of(stream.uuid, name), spec, nodes)
    wanted = create_settings({c.name: c.value for c in spec.configs}, stream)
    created = topic_create(
        actor=actor, stream=stream, name=name,
        partitions=assigned or (None if spec.num_partitions == -1 else spec.num_partitions),
        timestamptype=wanted.timestamptype, **wanted.topic)
    validating(validate_only)
    return {"num_partitions": created.partitions, "replication_factor": 1,
            "topic_id": topic_id(created),
            "configs": config_entries(stream, topic_configs(stream, created), topic=created)}


@handles(19, 2, 7)
async def create_topics(session: Session, header: RequestHeader, request: Any) -> Any:
    nodes = session.listener.live_nodes()
    results = [await _each(session, t.name, create_one, t, request.validate_only, nodes)
               for t in request.topics]
    return build(response_class(request), throttle_time=0, topics=results)


def delete_one(actor: AbstractBaseUser, stream: Stream, name: str) -> dict[str, Any]:
    topic_delete(actor=actor, stream=stream, name=name)
    return {}


@handles(20, 1, 6)
async def delete_topics(session: Session, header: RequestHeader, request: Any) -> Any:
    names = (request.topic_names if hasattr(request, "topic_names")
             else [t.name for t in request.topics if t.name is not None])
    results = [await _each(session, name, delete_one) for name in names]
    return build(response_class(request), throttle_time=0, responses=results)


@transaction.atomic
def grow_one(actor: AbstractBaseUser, stream: Stream, name: str, spec: Any,
             validate_only: bool, nodes: list[Node]) -> dict[str, Any]:
    current = Topic.objects.filter(stream=stream, name=name).values_list("partitions", flat=True)
    if current and spec.count <= current[0]:
        raise InvalidInput(f"topic {name} has {current[0]} partitions: give more than that",
                           field="partitions")
    if current:
        check_new_partitions(key_of(stream.uuid, name), current[0], spec.count,
                             spec.assignments, nodes)
    topic_edit(actor=actor, stream=stream, name=name, partitions=spec.count)
    validating(validate_only)
    return {}


@handles(37, 0, 3)
async def create_partitions(session: Session, header: RequestHeader, request: Any) -> Any:
    nodes = session.listener.live_nodes()
    results = [await _each(session, t.name, grow_one, t, request.validate_only, nodes)
               for t in request.topics]
    return build(response_class(request), throttle_time=0, results=results)
