"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37) and DescribeConfigs (32), through
the same topic services as every other interface (topicperm checked there)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from broker import errors
from broker.apis.metadata import topic_id
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.session import Session
from broker.topicconfig import DOCS, timestamptype_from, topic_configs
from replication.errors import (
    InvalidInput,
    StreamgateError,
)
from replication.models import Stream, Topic
from replication.names import parse_topic_name
from replication.services.topics import topic_create, topic_delete, topic_edit

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
CONFIG_TYPES = {"retention.ms": 5, "max.message.bytes": 3, "cleanup.policy": 7}  # else STRING
FIELD_CODES = {"partitions": errors.INVALID_PARTITIONS, "configs": errors.INVALID_CONFIG,
               "topic": errors.INVALID_TOPIC_EXCEPTION,
               "replication": errors.INVALID_REPLICATION_FACTOR}


def code_for(error: StreamgateError) -> errors.ErrorCode:
    """The Kafka error code for a domain refusal (its message goes along): its class's, or for
    refused input its field's."""
    if error.kafka_error == InvalidInput.kafka_error:
        return FIELD_CODES.get(error.field or "", errors.INVALID_REQUEST)
    return errors.ErrorCode[error.kafka_error]


async def _target(session: Session, name: str) -> tuple[Stream, str]:
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
        stream, topic = await _target(session, name)
        result = await session.run_sync(call, session.user, stream, topic, *args)
    except KafkaError as error:
        return {"name": name, "error_code": error.code, "error_message": error.message}
    except StreamgateError as error:
        return {"name": name, "error_code": code_for(error), "error_message": error.desc}
    finally:
        session.forget(name)
    return {"name": name, **result}


def _validating(validate_only: bool) -> None:
    if validate_only:
        transaction.set_rollback(True)


def _config_entries(configs: dict[str, str], documented: bool = False) -> list[dict[str, Any]]:
    return [{"name": name, "value": value, "read_only": True, "config_source": 1,
             "is_sensitive": False, "config_type": CONFIG_TYPES.get(name, 2),
             "documentation": DOCS[name] if documented else None}
            for name, value in configs.items()]


@transaction.atomic
def create_one(actor: AbstractBaseUser, stream: Stream, name: str, spec: Any,
               validate_only: bool) -> dict[str, Any]:
    if spec.replication_factor not in (-1, 1):
        raise InvalidInput(f"replication factor {spec.replication_factor}: a stream's store "
                           "keeps each message once per cluster; give 1 or -1 and replicate "
                           "streams to other clusters instead", field="replication")
    if spec.assignments:
        raise InvalidInput("manual replica assignments are not supported: leave them out")
    configs = {c.name: c.value for c in spec.configs}
    created = topic_create(
        actor=actor, stream=stream, name=name,
        partitions=None if spec.num_partitions == -1 else spec.num_partitions,
        timestamptype=timestamptype_from(configs, stream))
    _validating(validate_only)
    return {"num_partitions": created.partitions, "replication_factor": 1,
            "topic_id": topic_id(created),
            "configs": _config_entries(topic_configs(stream, created))}


@handles(19, 2, 7)
async def create_topics(session: Session, header: RequestHeader, request: Any) -> Any:
    results = [await _each(session, t.name, create_one, t, request.validate_only)
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
             validate_only: bool) -> dict[str, Any]:
    if spec.assignments:
        raise InvalidInput("manual replica assignments are not supported: leave them out")
    current = Topic.objects.filter(stream=stream, name=name).values_list("partitions", flat=True)
    if current and spec.count <= current[0]:
        raise InvalidInput(f"topic {name} has {current[0]} partitions: give more than that",
                           field="partitions")
    topic_edit(actor=actor, stream=stream, name=name, partitions=spec.count)
    _validating(validate_only)
    return {}


@handles(37, 0, 3)
async def create_partitions(session: Session, header: RequestHeader, request: Any) -> Any:
    results = [await _each(session, t.name, grow_one, t, request.validate_only)
               for t in request.topics]
    return build(response_class(request), throttle_time=0, results=results)


async def _describe_topic(session: Session, resource: Any, documented: bool) -> dict[str, Any]:
    resolved = await session.resolve(resource.resource_name)
    if resolved is None:
        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                         f"topic {resource.resource_name} does not exist")
    if not await session.perms(resolved.stream):
        raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED,
                         f"you hold no permission on {resolved.stream.path}")
    configs = topic_configs(resolved.stream, resolved.record)
    wanted = resource.configuration_keys
    if wanted is not None:
        configs = {k: v for k, v in configs.items() if k in wanted}
    return {"configs": _config_entries(configs, documented)}


async def _describe(session: Session, resource: Any, documented: bool) -> dict[str, Any]:
    base = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        if resource.resource_type == TOPIC_RESOURCE:
            return {**base, **await _describe_topic(session, resource, documented)}
        if resource.resource_type == BROKER_RESOURCE:
            return {**base, "configs": []}  # nothing a client may tune lives on a listener
        raise KafkaError(errors.INVALID_REQUEST,
                         f"resource type {resource.resource_type}: only topics and brokers")
    except KafkaError as error:
        return {**base, "error_code": error.code, "error_message": error.message}


@handles(32, 1, 4)
async def describe_configs(session: Session, header: RequestHeader, request: Any) -> Any:
    documented = bool(getattr(request, "include_documentation", False))
    results = [await _describe(session, r, documented) for r in request.resources]
    return build(response_class(request), throttle_time=0, results=results)
