"""The replication domain's models, by responsibility: clusters, gateways, streams and topics
(streams.py); links, upstreams, mode switches and failovers (links.py), and what the replicator
and gateways read of a moving link (moving.py); Spark jobs and default streams (jobs.py); Kafka
producer ids and consumer groups (kafka.py); the schema registry's subjects and schemas
(schemas.py). One Django app, `replication`: the models are
defined in its submodules and registered when this package is imported."""

from replication.models.jobs import DefaultStream, Job
from replication.models.kafka import KafkaGroup, KafkaProducerId, KafkaTransaction, TxnState
from replication.models.links import (
    Failover,
    ModeSwitch,
    ReplicaLink,
    ReplicaState,
    SyncMode,
    Upstream,
    link_is_stalled,
)
from replication.models.moving import GatewayLink, MovingLink, carried_topics
from replication.models.placement import Placement, Rebalance, StoreGroup
from replication.models.schemas import (
    Compatibility,
    RegisteredSchema,
    RegistryConfig,
    RegistryMode,
    SchemaType,
    SubjectVersion,
)
from replication.models.streams import (
    GATEWAY_HEARTBEAT_TIMEOUT,
    PERMISSIONS,
    CleanupPolicy,
    Cluster,
    Compression,
    Gateway,
    Stream,
    TimestampType,
    Topic,
)

__all__ = [
    "GATEWAY_HEARTBEAT_TIMEOUT",
    "PERMISSIONS",
    "CleanupPolicy",
    "Cluster",
    "Compatibility",
    "Compression",
    "DefaultStream",
    "Failover",
    "Gateway",
    "GatewayLink",
    "Job",
    "KafkaGroup",
    "KafkaProducerId",
    "KafkaTransaction",
    "ModeSwitch",
    "MovingLink",
    "Placement",
    "Rebalance",
    "RegisteredSchema",
    "RegistryConfig",
    "RegistryMode",
    "ReplicaLink",
    "ReplicaState",
    "SchemaType",
    "StoreGroup",
    "Stream",
    "SubjectVersion",
    "SyncMode",
    "TimestampType",
    "Topic",
    "TxnState",
    "Upstream",
    "carried_topics",
    "link_is_stalled",
]
