"""cluster create|list|info, cluster gateway set|get|list|resolve|delete and cluster store
add|list|remove.

Clusters and gateways belong to no tenant: any signed-in user may read them (a stream owner
needs the cluster names to write paths); only operators change them (the services check).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from operations.storegroups import cluster_group
from portal.rest import rows
from portal.rest.commands.registry import Row, command
from portal.rest.options import Bool, Int, Refused, Str
from replication import services
from replication.models import Cluster, Stream
from replication.services import rebalance, storegroups
from replication.services.clusters import MAX_COPIES, cluster_by_name

# MapR's -cluster picks the source cluster whose gateway table to use; streamgate has one.
ONE_TABLE = Refused(
    "cluster",
    reason="streamgate keeps one gateway configuration per destination cluster, shared by "
    "all source clusters: leave -cluster out",
)
DSTCLUSTER = Str("dstcluster", "the cluster where the gateways run", required=True)


@command("cluster/create", Str("name", "the cluster's name", required=True),
         Str("storeurl", "where its message store lives (default: the mode's default); a "
             "replicated group as libpq's multi-host URL", default=""),
         Int("requiredcopies", "servers every acknowledged acks=all or REST produce is on "
             "(default 1); refused where the store's group has fewer", min=1, max=MAX_COPIES,
             default=1),
         summary="Create a cluster (operators only).", changes=True)
def cluster_create(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.cluster_create(actor=user, name=opts["name"], store_url=opts["storeurl"],
                            required_copies=opts["requiredcopies"])


@command("cluster/info", Str("name", "the cluster's name", required=True),
         summary="A cluster's required copies and its message store's group: members, roles, "
                 "replication lag, last failover, and the alarm while copies are short.",
         changes=False)
def cluster_info(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [cluster_group(cluster_by_name(opts["name"], field="name"))]


@command("cluster/list", summary="List clusters, their gateways and your streams on them.",
         changes=False)
def cluster_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return rows.cluster_rows(Cluster.objects.all(), Stream.objects.restrict(user))


@command("cluster/gateway/set", ONE_TABLE, DSTCLUSTER,
         Str("gateways", "space-separated host or host:port names", required=True),
         summary="Set the gateways of a destination cluster (operators only).", changes=True)
def gateway_set(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.cluster_gateway_set(actor=user, dstcluster=opts["dstcluster"],
                                 gateways=opts["gateways"])


@command("cluster/gateway/delete", ONE_TABLE, DSTCLUSTER,
         summary="Remove the gateways of a destination cluster (operators only).", changes=True)
def gateway_delete(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.cluster_gateway_delete(actor=user, dstcluster=opts["dstcluster"])


@command("cluster/gateway/list", ONE_TABLE,
         summary="List the gateway configuration of every destination cluster.", changes=False)
def gateway_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return rows.gateway_config_rows(Cluster.objects.all())


@command("cluster/gateway/get", ONE_TABLE, DSTCLUSTER,
         summary="Show each gateway of a destination cluster: status, heartbeat and "
         "what it applied.", changes=False)
def gateway_get(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return rows.gateway_rows(cluster_by_name(opts["dstcluster"]))


@command("cluster/gateway/resolve", ONE_TABLE, DSTCLUSTER,
         summary="The gateways of a destination cluster that are running now.", changes=False)
def gateway_resolve(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [rows.resolve_row(cluster_by_name(opts["dstcluster"]))]


STORE_CLUSTER = Str("cluster", "the cluster whose store groups these are", required=True)


@command("cluster/store/add", STORE_CLUSTER,
         Str("name", "the new group's name (lowercase, e.g. s2)", required=True),
         Str("url", "its message store: postgresql://user@host:port/database (created if "
             "missing; a replicated group as libpq's multi-host URL)", required=True),
         summary="Add a store group to a cluster: new partitions are placed on the "
                 "least-loaded group (operators only).", changes=True)
def store_add(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    storegroups.store_group_add(actor=user, cluster=opts["cluster"], name=opts["name"],
                                url=opts["url"])


@command("cluster/store/list", STORE_CLUSTER,
         summary="A cluster's store groups: partitions, bytes and messages held, state and "
                 "health (operators only).", changes=False)
def store_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return storegroups.store_group_list(actor=user, cluster=opts["cluster"])


@command("cluster/store/remove", STORE_CLUSTER,
         Str("name", "the group to remove", required=True),
         summary="Remove an empty store group from a cluster; refused while it holds "
                 "partitions, and for the last group (operators only).", changes=True)
def store_remove(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    storegroups.store_group_remove(actor=user, cluster=opts["cluster"], name=opts["name"])


DRYRUN = Bool("dryrun", "true: show the plan of moves and change nothing", default=False)
THROTTLE = Int("throttle", "at most this many bytes moved per second (default: no limit)",
               min=1)


@command("cluster/store/rebalance", STORE_CLUSTER, DRYRUN, THROTTLE,
         summary="Move partitions until the active store groups are within 10% of each other "
                 "by bytes, in the background (operators only).", changes=True)
def store_rebalance(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [rebalance.rebalance_start(actor=user, cluster=opts["cluster"],
                                      dryrun=opts["dryrun"], throttle=opts["throttle"])]


@command("cluster/store/drain", STORE_CLUSTER,
         Str("name", "the group to empty", required=True), DRYRUN, THROTTLE,
         summary="Stop placing partitions on a store group and move every partition it holds "
                 "to the others, in the background; then cluster store remove takes it "
                 "(operators only).", changes=True)
def store_drain(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [rebalance.store_group_drain(actor=user, cluster=opts["cluster"], name=opts["name"],
                                        dryrun=opts["dryrun"], throttle=opts["throttle"])]


@command("cluster/store/rebalancestatus", STORE_CLUSTER,
         Int("id", "only this run (a rebalance, drain or partition move)", min=1),
         summary="A cluster's rebalances, drains and partition moves, newest first: state, "
                 "moves and bytes done (operators only).", changes=False)
def store_rebalance_status(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return rebalance.rebalance_status(actor=user, cluster=opts["cluster"], id=opts["id"])
