"""Domain errors. Each names the problem and, where there is one, what to do about it as a
`Hint`; each interface renders both in its own idiom: the maprcli command line in MapR's JSON
envelope on /rest and the CLI (portal/rest/hints.py), a link to the page that does it in the
browser (portal/web/hints.py), a `hint` object beside the message on /api/v1, a plain sentence
beside a Kafka error code on the Kafka listener.

A kind of error declares in its class line how every interface classifies it: `errno` (what
maprcli reports in its error `id`, POSIX numbers as MapR does), `http_status`, and
`kafka_error` (the name of a Kafka error code, as kio's `ErrorCode` and Kafka's Errors.java
spell it). No interface keeps a chain of isinstance checks of its own.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hint:
    """What to do about a refusal. `action` and `params` are the machine form (`replica.resume`
    with the source and replica paths), which interfaces turn into a command or a page; `words`
    says it in plain words for any reader; `cli` is the sentence the command line reads, with
    `{command}` where the command goes (today's maprcli-style text, kept word for word)."""

    action: str
    words: str
    params: Mapping[str, Any] = field(default_factory=dict)
    cli: str = "{words} with {command}"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "params": dict(self.params), "text": self.words}


class StreamgateError(Exception):
    errno: int = _errno.EINVAL
    http_status: int = 400
    kafka_error: str = "invalid_request"

    def __init_subclass__(cls, *, errno: int | None = None, http_status: int | None = None,
                          kafka_error: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if errno is not None:
            cls.errno = errno
        if http_status is not None:
            cls.http_status = http_status
        if kafka_error is not None:
            cls.kafka_error = kafka_error

    def __init__(self, problem: str, *, field: str | None = None,
                 hint: Hint | None = None) -> None:
        self.problem = problem
        self.hint = hint
        self.field = field
        super().__init__(self.desc)

    @property
    def desc(self) -> str:
        """The problem and what to do, in plain words (no interface's syntax)."""
        if self.hint is None:
            return self.problem
        return f"{self.problem}: {self.hint.words}"


class InvalidInput(StreamgateError):
    """Malformed or out-of-range input."""


class NotFound(StreamgateError, errno=_errno.ENOENT, http_status=404,
               kafka_error="unknown_topic_or_partition"):
    pass


class PermissionDenied(StreamgateError, errno=_errno.EPERM, http_status=403,
                       kafka_error="topic_authorization_failed"):
    pass


class AlreadyExists(StreamgateError, errno=_errno.EEXIST, http_status=409,
                    kafka_error="topic_already_exists"):
    pass


class Conflict(StreamgateError, errno=_errno.EBUSY, http_status=409,
               kafka_error="policy_violation"):
    """The request contradicts a rule of the topology (limits, origins, cycles, state)."""


class ProducersStopped(Conflict, kafka_error="not_leader_or_follower"):
    """A stream whose producers a failover stopped: for now (a planned failover under way) or
    until a failback. A produce refused with it wrote nothing and may be retried: to Kafka
    clients it reads as a partition whose leader moves, a code they retry keeping the
    producer's epoch and sequences (a permanent code makes librdkafka bump the epoch and
    renumber what is not yet acknowledged, batches maybe written included: invariant 10)."""


class NotSupported(StreamgateError, errno=_errno.EOPNOTSUPP, http_status=501):
    """An option the product cannot honour yet (DESIGN.md invariant 8): refused, never faked."""


class NotOrigin(InvalidInput, kafka_error="topic_authorization_failed"):
    """Producing to a replica's copy of a topic whose origin is another stream (invariant 4):
    not writable here, the message names its origin."""


class ChangeAtOrigin(InvalidInput, kafka_error="policy_violation"):
    """Changing (creating, deleting, repartitioning) a replica's copy of a topic: the change
    is made at the topic's origin (invariant 4)."""


class NoSuchPartition(InvalidInput, kafka_error="unknown_topic_or_partition"):
    """A produce to a partition the topic does not have."""


class TooLarge(InvalidInput, kafka_error="message_too_large"):
    """A message over the maximum message size."""


class UnacceptableCredential(InvalidInput, kafka_error="unacceptable_credential"):
    """A SCRAM credential the listener would not keep (iterations out of range, a short salt,
    an empty password)."""


class UnsupportedMechanism(InvalidInput, kafka_error="unsupported_sasl_mechanism"):
    """A SASL mechanism other than SCRAM-SHA-256 and SCRAM-SHA-512 for a SCRAM credential."""


class NoCredential(NotFound, kafka_error="resource_not_found"):
    """A user, or a user's SCRAM credential for a mechanism, that does not exist."""


class OthersCredential(PermissionDenied, kafka_error="cluster_authorization_failed"):
    """Another user's SCRAM credentials, asked for by a user who is not an operator."""


class ServiceUnavailable(StreamgateError, errno=_errno.EAGAIN, http_status=503,
                         kafka_error="request_timed_out"):
    """A service the request needs (the control plane's Redis, a cluster's message store) did
    not answer. The request changed nothing and may be sent again after `retry_after` seconds,
    which interfaces pass on (HTTP's Retry-After)."""

    retry_after = 5


class PartitionMoving(ServiceUnavailable, kafka_error="not_leader_or_follower"):
    """A write met a partition held by no store group for longer than the router retries: a
    move's cut-over (issue 33), or one interrupted there until the move is run again. Nothing
    was written; Kafka clients retry NOT_LEADER_OR_FOLLOWER, as after a leader change."""

    retry_after = 1


class QuotaExceeded(StreamgateError, errno=_errno.EAGAIN, http_status=429,
                    kafka_error="throttling_quota_exceeded"):
    """The tenant is over a quota an operator set (replication/quotas.py): nothing was done;
    send it again after `retry_after` seconds (HTTP's Retry-After)."""

    def __init__(self, problem: str, *, retry_after: int) -> None:
        super().__init__(problem)
        self.retry_after = retry_after


class PlanLimitExceeded(Conflict, errno=_errno.EDQUOT,
                        kafka_error="policy_violation"):
    """The tenant's plan allows no more of something (streams, partitions, stored bytes):
    nothing was done. Not retriable as it stands: a Kafka client gets POLICY_VIOLATION, which
    no client retries, rather than a throttle it would wait out and resend forever."""


def replicas_of(path: str) -> Hint:
    """See the replicas the stream at `path` sends to."""
    return Hint("replica.list", "see the stream's replicas", {"path": path},
                cli="see {command}")


def upstreams_of(path: str) -> Hint:
    """See the sources the replica at `path` accepts data from."""
    return Hint("upstream.list", "see the replica's upstreams", {"path": path},
                cli="see {command}")
