"""How many copies a produce's commit waits for. By default every commit waits for the server's
synchronous_commit: on a replicated group (Patroni's synchronous_mode) that is the synchronous
standby's flush, so an acknowledged acks=all produce survives the loss of the primary with its
disk (invariant 11). A Kafka acks=0 or acks=1 produce asks for less and may say so: inside
`primary_commit_only()` an append commits with synchronous_commit=local, acknowledged once on
the primary's own disk, as a Kafka leader answers acks=1 before its followers have the batch.

A context variable rather than one more argument through every store's append: the listener
sets it around a request's appends, in the thread that runs them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_local = ContextVar("streamgate_local_commit", default=False)
LOCAL_COMMIT = "SET LOCAL synchronous_commit = local"


@contextmanager
def primary_commit_only(local: bool = True) -> Iterator[None]:
    token = _local.set(local)
    try:
        yield
    finally:
        _local.reset(token)


def local_commit() -> bool:
    return _local.get()
