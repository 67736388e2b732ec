"""Outages of what a request needs, answered as 503 with Retry-After rather than a 500.

While the control plane's Redis or a cluster's message store (PostgreSQL) restarts, their
clients raise connection errors from deep inside a request. Both error handlers (/api/v1's
`portal.api.errors`, /rest's envelope) turn them into `ServiceUnavailable` here, so every
interface names the same problem in its own shape, and a client knows to retry.

A 503 promises the request changed nothing. An error raised by an on_commit hook comes after
the control plane committed (stream and topic deletion drop their messages that way), so it is
left to the handlers' 500 path rather than answered with a retry that would find it done.
"""

from __future__ import annotations

import logging
from types import TracebackType

import psycopg
import redis
from django import db
from django.conf import settings

from replication.engine.redisurl import address
from replication.errors import ServiceUnavailable

logger = logging.getLogger(__name__)

# redis-py's ConnectionError covers refused connections and BusyLoadingError (a restarted
# Redis still loading its data); TimeoutError a Redis that accepts but does not answer.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
# Django wraps the control database's errors in its own classes: a bare psycopg error comes
# from a message store's connection (replication/engine/pg), or its pool's timeout.
STORE_DOWN = (psycopg.OperationalError,)
# The control database out of reach, as Django reports it: no server answers (a Patroni group
# between a primary's death and a standby's promotion), or a pooled connection died with it.
CONTROL_DOWN = (db.OperationalError, db.InterfaceError)
COMMIT_HOOKS = frozenset({"on_commit", "run_and_clear_commit_hooks"})


def as_unavailable(exc: Exception) -> ServiceUnavailable | None:
    """The 503 to answer for `exc`, or None when it is no outage (or came after a commit)."""
    if isinstance(exc, ServiceUnavailable):
        return exc
    if not isinstance(exc, REDIS_DOWN + STORE_DOWN + CONTROL_DOWN) or \
            _after_commit(exc.__traceback__):
        return None
    reason = _first_line(exc)
    if isinstance(exc, CONTROL_DOWN):
        desc = (f"the control database did not answer ({reason}): retry in a few seconds "
                "(a replicated one is electing a new primary)")
    elif isinstance(exc, REDIS_DOWN):
        desc = (f"the control plane's Redis at {redis_address()} is unreachable ({reason}): "
                "retry in a few seconds")
    else:
        desc = (f"a cluster's message store did not answer ({reason}): retry in a few "
                "seconds; GET /readyz names the cluster whose store is down")
    logger.warning("service unavailable: %s", desc)
    return ServiceUnavailable(desc)


def retry_headers(exc: Exception) -> dict[str, str] | None:
    """Retry-After for an error that says when to send the request again (an outage, a
    tenant over its quota)."""
    after = getattr(exc, "retry_after", None)
    return None if after is None else {"Retry-After": str(after)}


def redis_address() -> str:
    """host:port of REDIS_URL (or its sentinels), never its password."""
    return address(settings.REDIS_URL)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _after_commit(traceback: TracebackType | None) -> bool:
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if code.co_name in COMMIT_HOOKS and code.co_filename.endswith(
                "django/db/backends/base/base.py"):
            return True
        traceback = traceback.tb_next
    return False
