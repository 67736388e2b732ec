"""maprcli's commands over HTTP. Importing the handler modules registers their commands."""

from portal.rest.commands import (
    alarms,
    audit,
    clusters,
    cursors,
    defaultstreams,
    failover,
    jobs,
    maintenance,
    quotas,
    replicas,
    replicators,
    schemas,
    streams,
    topics,
    users,
)
from portal.rest.commands.registry import REGISTRY, Command

__all__ = [
    "REGISTRY",
    "Command",
    "alarms",
    "audit",
    "clusters",
    "cursors",
    "defaultstreams",
    "failover",
    "jobs",
    "maintenance",
    "quotas",
    "replicas",
    "replicators",
    "schemas",
    "streams",
    "topics",
    "users",
]
