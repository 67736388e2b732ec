"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics: Kafka's
config names read from and written to the stream's and the topic's settings
(broker/topicconfig.py), through the services the CLI and REST use, with their permission
checks (stream_edit: adminperm; topic_edit: topicperm). A listener has nothing a client may
tune: broker resources are described empty and their alteration refused."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from broker import errors
from broker.apis.admin import code_for, target, validating
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.session import Session
from broker.topicconfig import (
    SETTABLE,
    config_entries,
    default_configs,
    settings_for,
    topic_configs,
)
from replication.errors import InvalidInput, StreamgateError
from replication.models import Stream, Topic
from replication.services.streams import stream_edit
from replication.services.topics import topic_edit, topic_of

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
LISTS = {"cleanup.policy"}  # the list configs APPEND and SUBTRACT apply to
Configs = dict[str, str | None]
Desired = Callable[[Configs, Configs], Configs]  # (current, defaults) -> the configs wanted


# --- DescribeConfigs -----------------------------------------------------------------------------


def _described(resolved_stream: Stream, name: str) -> tuple[Stream, Topic | None,
                                                              dict[str, str]]:
    """The stream and topic as they are now (a cached resolution may predate an alteration)."""
    stream = Stream.objects.get(pk=resolved_stream.pk)
    topic = stream.topics.filter(name=name).first()
    return stream, topic, topic_configs(stream, topic)


async def _describe_topic(session: Session, resource: Any, documented: bool) -> dict[str, Any]:
    resolved = await session.resolve(resource.resource_name)
    if resolved is None:
        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                         f"topic {resource.resource_name} does not exist")
    if not await session.perms(resolved.stream):
        raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED,
                         f"you hold no permission on {resolved.stream.path}")
    stream, topic, configs = await session.run_sync(_described, resolved.stream, resolved.topic)
    wanted = resource.configuration_keys
    if wanted is not None:
        configs = {k: v for k, v in configs.items() if k in wanted}
    return {"configs": config_entries(stream, configs, documented, topic)}


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


# --- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------------


@transaction.atomic
def alter_topic(actor: AbstractBaseUser, stream: Stream, name: str, desired: Desired,
                validate_only: bool) -> None:
    """Set the topic's configs to what `desired` makes of the current ones, in one
    transaction: the stream's settings through stream_edit, the topic's (its timestamp type,
    its compaction overrides) through topic_edit, only those that change."""
    stream.require(actor, "topicperm", "adminperm", action="alter topic configs")
    topic = topic_of(stream, name)
    current: Configs = dict(topic_configs(stream, topic))
    wanted = settings_for(stream, topic, desired(current, dict(default_configs(stream))))
    if wanted.stream:
        stream_edit(actor=actor, stream=stream, **wanted.stream)
    if wanted.timestamptype or wanted.topic:
        topic_edit(actor=actor, stream=stream, name=name, timestamptype=wanted.timestamptype,
                   **wanted.topic)
    validating(validate_only)


def _unique(names: list[str]) -> None:
    twice = sorted(n for n, count in Counter(names).items() if count > 1)
    if twice:
        raise KafkaError(errors.INVALID_REQUEST,
                         f"config {', '.join(twice)} given more than once: give each once")


async def _alter(session: Session, resource: Any, desired: Desired,
                 validate_only: bool) -> dict[str, Any]:
    base = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        _unique([c.name for c in resource.configs])
        if resource.resource_type == BROKER_RESOURCE:
            # Kafka checks ALTER_CONFIGS on the cluster first, and nobody holds it here
            # (DescribeCluster's authorized operations say so).
            raise KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED,
                             "altering a listener's configs needs ALTER_CONFIGS on the cluster, "
                             "which nobody holds: a listener has no config a client may set; "
                             "topics' configs are their streams' and topics' settings")
        if resource.resource_type != TOPIC_RESOURCE:
            raise KafkaError(errors.INVALID_REQUEST,
                             f"resource type {resource.resource_type}: only topics are altered")
        stream, name = await target(session, resource.resource_name)
        await session.run_sync(alter_topic, session.user, stream, name, desired, validate_only)
    except KafkaError as error:
        return {**base, "error_code": error.code, "error_message": error.message}
    except StreamgateError as error:
        return {**base, "error_code": code_for(error), "error_message": error.desc}
    finally:
        session.forget()  # a stream's setting shows in every topic of it
    return {**base, "error_code": errors.NONE, "error_message": None}


def _replacing(configs: Any) -> Desired:
    """AlterConfigs: the configs given, every other settable one back to its default (Kafka
    drops the overrides a request leaves out)."""
    given = {c.name: c.value for c in configs}
    return lambda current, defaults: {**{n: defaults[n] for n in SETTABLE}, **given}


def _listed(value: str | None) -> set[str]:
    return {item for item in (value or "").split(",") if item}


def _applying(configs: Any) -> Desired:
    """IncrementalAlterConfigs: the current configs with each operation applied in turn."""
    def desired(current: Configs, defaults: Configs) -> Configs:
        out = dict(current)
        for config in configs:
            name, op, value = config.name, config.config_operation, config.value
            if op in (APPEND, SUBTRACT) and name not in LISTS:
                raise InvalidInput(f"{name} is not a list: APPEND and SUBTRACT apply to "
                                   f"{', '.join(sorted(LISTS))}; use SET", field="configs")
            if op == SET:
                out[name] = value
            elif op == DELETE:
                out[name] = defaults.get(name, current.get(name))
            elif op in (APPEND, SUBTRACT):
                items = _listed(out.get(name) or current.get(name))
                items = items | _listed(value) if op == APPEND else items - _listed(value)
                out[name] = ",".join(sorted(items))
            else:
                raise InvalidInput(f"config operation {op} of {name}: give 0 (SET), 1 (DELETE), "
                                   "2 (APPEND) or 3 (SUBTRACT)", field="configs")
        return out
    return desired


@handles(33, 0, 2)
async def alter_configs(session: Session, header: RequestHeader, request: Any) -> Any:
    responses = [await _alter(session, r, _replacing(r.configs), request.validate_only)
                 for r in request.resources]
    return build(response_class(request), throttle_time=0, responses=responses)


@handles(44, 0, 1)
async def incremental_alter_configs(session: Session, header: RequestHeader,
                                    request: Any) -> Any:
    responses = [await _alter(session, r, _applying(r.configs), request.validate_only)
                 for r in request.resources]
    return build(response_class(request), throttle_time=0, responses=responses)
