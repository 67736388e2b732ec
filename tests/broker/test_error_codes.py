"""What a Kafka client reads of a refusal: the code its class declares (replication/errors.py)
and a plain sentence, never command-line syntax."""

from __future__ import annotations

import re

import pytest
from kio.schema.errors import ErrorCode

from broker.apis.admin import code_for
from broker.apis.produce import error_of
from replication.engine.recordbatch import BatchTooLarge, CorruptRecord
from replication.engine.sequences import SequenceError
from replication.errors import (
    ChangeAtOrigin,
    Conflict,
    Hint,
    InvalidInput,
    NoSuchPartition,
    NotFound,
    NotOrigin,
    PermissionDenied,
    ProducersStopped,
    TooLarge,
)
from replication.services import replica_failover, replica_pause

CLI = re.compile(r"streamgate|'[a-z]+ [a-z]+|-path|-replica")


@pytest.mark.parametrize(("error", "code"), [
    (NotFound("gone"), ErrorCode.unknown_topic_or_partition),
    (NoSuchPartition("no partition 9"), ErrorCode.unknown_topic_or_partition),
    (PermissionDenied("no"), ErrorCode.topic_authorization_failed),
    (NotOrigin("replicated from x"), ErrorCode.topic_authorization_failed),
    (TooLarge("big"), ErrorCode.message_too_large),
    (ProducersStopped("stopped"), ErrorCode.not_leader_or_follower),
    (Conflict("rule"), ErrorCode.policy_violation),
    (InvalidInput("bad"), ErrorCode.invalid_request),
    (SequenceError("old epoch", fenced=True), ErrorCode.invalid_producer_epoch),
    (SequenceError("gap"), ErrorCode.out_of_order_sequence_number),
    (CorruptRecord("crc"), ErrorCode.corrupt_message),
    (BatchTooLarge("huge"), ErrorCode.record_list_too_large),
])
def test_each_error_answers_with_the_code_its_class_declares(error, code):
    assert error_of(error)[0] == code


def test_admin_refines_refused_input_by_field_and_keeps_class_codes():
    assert code_for(InvalidInput("x", field="partitions")) == ErrorCode.invalid_partitions
    assert code_for(ChangeAtOrigin("replicated from y")) == ErrorCode.policy_violation
    assert code_for(NotFound("x", field="partitions")) == ErrorCode.unknown_topic_or_partition


def test_a_hint_reaches_kafka_clients_as_plain_words(owner, agreed):
    replica_pause(actor=owner, source=agreed.source, replica=agreed.replica)
    with pytest.raises(Conflict) as refused:
        replica_failover(replica=agreed.replica, force=True, actor=owner)
    code, message = error_of(refused.value)
    assert code == ErrorCode.policy_violation
    assert message.endswith("may lag far behind: resume it and let it catch up before "
                            "failing over")
    assert not CLI.search(message)


def test_a_missing_topic_names_no_command():
    err = NotFound("topic /mapr/c/s:t does not exist and the stream's autocreate is false",
                   hint=Hint("topic.create", "create the topic first",
                             {"path": "/mapr/c/s", "topic": "t"}, cli="create it with {command}"))
    assert error_of(err) == (ErrorCode.unknown_topic_or_partition,
                             "topic /mapr/c/s:t does not exist and the stream's autocreate is "
                             "false: create the topic first")
