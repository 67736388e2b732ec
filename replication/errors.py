"""Domain errors. Each names the problem and the fix; interfaces map them to their own shape
(maprcli JSON envelope on /rest and the CLI, DRF errors on /api/v1).

`errno` follows what maprcli reports in its error `id` (POSIX numbers, as MapR does); a kind
of error names its errno and HTTP status in its class line.
"""

import errno as _errno


class StreamgateError(Exception):
    errno: int = _errno.EINVAL
    http_status: int = 400

    def __init_subclass__(cls, *, errno: int | None = None, http_status: int | None = None,
                          **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if errno is not None:
            cls.errno = errno
        if http_status is not None:
            cls.http_status = http_status

    def __init__(self, desc: str, *, field: str | None = None) -> None:
        super().__init__(desc)
        self.desc = desc
        self.field = field


class InvalidInput(StreamgateError):
    """Malformed or out-of-range input."""


class NotFound(StreamgateError, errno=_errno.ENOENT, http_status=404):
    pass


class PermissionDenied(StreamgateError, errno=_errno.EPERM, http_status=403):
    pass


class AlreadyExists(StreamgateError, errno=_errno.EEXIST, http_status=409):
    pass


class Conflict(StreamgateError, errno=_errno.EBUSY, http_status=409):
    """The request contradicts a rule of the topology (limits, origins, cycles, state)."""


class ProducersStopped(Conflict):
    """A stream whose producers a failover stopped: for now (a planned failover under way) or
    until a failback. A produce refused with it wrote nothing and may be retried."""


class NotSupported(StreamgateError, errno=_errno.EOPNOTSUPP, http_status=501):
    """An option the product cannot honour yet (DESIGN.md invariant 8): refused, never faked."""


class NotOrigin(InvalidInput):
    """Producing to a replica's copy of a topic whose origin is another stream (invariant 4)."""


class TooLarge(InvalidInput):
    """A message over the maximum message size."""


class ServiceUnavailable(StreamgateError, errno=_errno.EAGAIN, http_status=503):
    """A service the request needs (the control plane's Redis, a cluster's message store) did
    not answer. The request changed nothing and may be sent again after `retry_after` seconds,
    which interfaces pass on (HTTP's Retry-After)."""

    retry_after = 5
