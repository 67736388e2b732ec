"""Kafka error codes the listener answers with, and `KafkaError` for a request that fails whole.

Codes are kio's `ErrorCode` members (the numbers of Kafka's Errors.java); the aliases below are
the ones handlers use, so a grep finds every place that answers with one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import psycopg
import redis
from django.db import InterfaceError, OperationalError
from kio.schema.errors import ErrorCode

NONE = ErrorCode.none
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
CORRUPT_MESSAGE = ErrorCode.corrupt_message
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
LEADER_NOT_AVAILABLE = ErrorCode.leader_not_available
NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
RECORD_LIST_TOO_LARGE = ErrorCode.record_list_too_large
INVALID_TOPIC_EXCEPTION = ErrorCode.invalid_topic_exception
INVALID_REQUIRED_ACKS = ErrorCode.invalid_required_acks
TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.cluster_authorization_failed
UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
ILLEGAL_SASL_STATE = ErrorCode.illegal_sasl_state
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
TOPIC_ALREADY_EXISTS = ErrorCode.topic_already_exists
INVALID_PARTITIONS = ErrorCode.invalid_partitions
INVALID_REPLICATION_FACTOR = ErrorCode.invalid_replication_factor
INVALID_REQUEST = ErrorCode.invalid_request
INVALID_CONFIG = ErrorCode.invalid_config
POLICY_VIOLATION = ErrorCode.policy_violation
SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed
INVALID_RECORD = ErrorCode.invalid_record
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
REQUEST_TIMED_OUT = ErrorCode.request_timed_out
DUPLICATE_RESOURCE = ErrorCode.duplicate_resource

# A message store that cannot be reached or failed mid-write (a restart, a dropped connection,
# a pool with no connection to give, SQLite's lock): Kafka's broker answers a failed log
# directory with KAFKA_STORAGE_ERROR, which clients retry. An idempotent producer then retries
# the batch with its sequence and the store writes it once; a code clients take as permanent
# (UNKNOWN_SERVER_ERROR) fails the batch and makes librdkafka bump its epoch and renumber what
# is not yet acknowledged, so a batch written before the error is written again (invariant 10).
STORE_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, sqlite3.OperationalError)
# The control database or Redis out of reach: the produce may or may not have been stored, so
# the answer is Kafka's retriable, possibly-written REQUEST_TIMED_OUT.
CONTROL_UNAVAILABLE = (OperationalError, InterfaceError, redis.ConnectionError,
                       redis.TimeoutError)


def code_of(error: BaseException, fields: Mapping[str, ErrorCode] | None = None,
            ) -> ErrorCode | None:
    """The Kafka error code an error declares as its class's `kafka_error` (every domain error
    does: replication/errors.py; the engine's and the listener's own errors too), refined by
    the field it names where a request gives a field its own code (`fields`); None for an
    error that declares none."""
    field = getattr(error, "field", None)
    if fields and field in fields:
        return fields[field]
    name = getattr(error, "kafka_error", None)
    return None if name is None else ErrorCode[name]


class KafkaError(Exception):
    """The whole request fails with `code`: the dispatcher answers with the request's response
    shape carrying the code (and the message where the version has an error_message field)."""

    def __init__(self, code: ErrorCode | int, message: str = "") -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = ErrorCode(code)
        self.message = message


class CloseConnection(Exception):
    """The connection is closed without an answer, as a Kafka broker closes it (a frame over
    the size limit, a request it cannot parse, a failed v0 SASL exchange)."""
