"""The data plane's engine core: message store and batch apply. Plain Python, no Django, so
gateways, Spark executors and tests use it alike (DESIGN.md)."""

from replication.engine.factory import create_database, open_store
from replication.engine.store import (
    Applied,
    Message,
    Misordered,
    OffsetOutOfRange,
    PartitionOutOfRange,
    Record,
    StoreError,
    UnknownTopic,
    choose_partition,
)
from replication.engine.storebase import MessageStore

__all__ = [
    "Applied",
    "Message",
    "MessageStore",
    "Misordered",
    "OffsetOutOfRange",
    "PartitionOutOfRange",
    "Record",
    "StoreError",
    "UnknownTopic",
    "choose_partition",
    "create_database",
    "open_store",
]
