"""Workflows over the domain: keyword-only functions named `<entity>_<action>`.

Rules about one object live on the models; these functions check permissions, apply the
topology rules and keep the database consistent in one transaction each.
"""

from replication.services.clusters import (
    cluster_create,
    cluster_gateway_delete,
    cluster_gateway_set,
)
from replication.services.failback import replica_failback
from replication.services.failover import replica_failover
from replication.services.jobs import replica_repair
from replication.services.quotas import tenant_quota_set
from replication.services.replicas import (
    replica_add,
    replica_autosetup,
    replica_connect,
    replica_edit,
    replica_pause,
    replica_remove,
    replica_resume,
)
from replication.services.streams import stream_create, stream_delete, stream_edit
from replication.services.topics import topic_create, topic_delete, topic_edit
from replication.services.upstreams import upstream_add, upstream_remove
from replication.services.verify import replica_verify

__all__ = [
    "cluster_create",
    "cluster_gateway_delete",
    "cluster_gateway_set",
    "replica_add",
    "replica_autosetup",
    "replica_connect",
    "replica_edit",
    "replica_failback",
    "replica_failover",
    "replica_pause",
    "replica_remove",
    "replica_repair",
    "replica_resume",
    "replica_verify",
    "stream_create",
    "stream_delete",
    "stream_edit",
    "tenant_quota_set",
    "topic_create",
    "topic_delete",
    "topic_edit",
    "upstream_add",
    "upstream_remove",
]
