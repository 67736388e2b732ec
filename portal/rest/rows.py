"""MapR-shaped rows for the maprcli-style interface (/rest and the `streamgate` CLI).

Functions from model objects and the domain's figures (replication/figures.py) to dicts, with
maprcli's field names and order, so scripts written against maprcli read streamgate's output
unchanged. Each function issues a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone

from replication.figures import (
    LinkStatus,
    epoch_ms,
    link_status,
    pending_figures,
    replica_links,
    storage_figures,
)
from replication.models import (
    PERMISSIONS,
    Cluster,
    Failover,
    Gateway,
    Job,
    ReplicaLink,
    Stream,
    SyncMode,
    Topic,
)
from replication.services.compaction import compaction_summary
from replication.services.cursors import CursorStanding
from replication.services.transactions import topic_transactions
from replication.stores import store_for
from replication.transport import transport

Row = dict[str, Any]

def mapr_time(epoch_ms: int) -> str:
    """maprcli's timestamp text, e.g. "1970-01-01T12:00:00.000+0000 AM"."""
    moment = timezone.localtime(datetime.fromtimestamp(epoch_ms / 1000, tz=UTC))
    millis = moment.microsecond // 1000
    return f"{moment:%Y-%m-%dT%I:%M:%S}.{millis:03d}{moment:%z} {moment:%p}"


def stream_info(stream: Stream, show_aces: bool) -> Row:
    """`stream info`. MapR shows the ACEs only to holders of adminperm."""
    sizes = store_for(stream.cluster).sizes(stream.uuid)
    row: Row = {
        "path": stream.path,
        "physicalsize": sizes["physicalsize"],
        "logicalsize": sizes["logicalsize"],
        "numtopics": stream.topics.count(),
        "defaultpartitions": stream.defaultpartitions,
        "ttl": stream.ttl,
        "compression": stream.compression,
        "autocreate": stream.autocreate,
    }
    if show_aces:
        row.update({perm: getattr(stream, perm) for perm in PERMISSIONS})
    row.update({
        "ischangelog": False,  # change-data-capture streams are refused at creation
        "defaulttimestamptype": stream.defaulttimestamptype,
        "compact": stream.compact,
        "mincompactionlag": stream.mincompactionlag,
        "deleteretention": stream.deleteretention,
        # streamgate's own fields, after MapR's.
        "mincleanabledirtyratio": stream.mincleanabledirtyratio,
        "compaction": compaction_summary(stream),
        "cluster": stream.cluster.name,
        "tenant": stream.tenant.name,
        "uuid": str(stream.uuid),
    })
    return row


def stream_rows(streams: QuerySet[Stream]) -> list[Row]:
    """`stream list` (streamgate's own command)."""
    # Meta.ordering is not applied to aggregating queries: order explicitly.
    annotated = streams.select_related("cluster", "tenant").annotate(
        numtopics=Count("topics", distinct=True)
    ).order_by("path")
    return [
        {
            "path": stream.path,
            "cluster": stream.cluster.name,
            "tenant": stream.tenant.name,
            "numtopics": stream.numtopics,
            "uuid": str(stream.uuid),
        }
        for stream in annotated
    ]


def topic_rows(stream: Stream) -> list[Row]:
    """`stream topic list`."""
    topics = list(stream.topics.all())
    figures = storage_figures(topics)
    return [
        {
            "topic": topic.name,
            "partitions": topic.partitions,
            "cleanuppolicy": topic.policy,
            "consumers": max((p.consumers for p in figures[topic.pk]), default=0),
            "physicalsize": sum(p.physicalsize for p in figures[topic.pk]),
            "logicalsize": sum(p.logicalsize for p in figures[topic.pk]),
            "maxlag": max((p.lag for p in figures[topic.pk]), default=0),
        }
        for topic in topics
    ]


def partition_rows(topic: Topic) -> list[Row]:
    """`stream topic info`: one row per partition, with its last stable offset and open
    Kafka transactions (what a read_committed consumer reads up to, and why), and the
    topic's cleanup policy and compaction settings in force (a replica's are its origin's)."""
    txns = topic_transactions(topic=topic)
    lag, retention, ratio = topic.compaction()
    return [
        {
            "partitionid": index,
            "physicalsize": p.physicalsize,
            "logicalsize": p.logicalsize,
            "maxoffset": p.maxoffset,
            "minoffsetacrossconsumers": p.minoffsetacrossconsumers,
            "mintimestamp": mapr_time(p.mintimestamp),
            "maxtimestamp": mapr_time(p.maxtimestamp),
            "mintimestampacrossconsumers": mapr_time(p.mintimestampacrossconsumers),
            "timestamptype": topic.timestamptype,
            "laststableoffset": txns[index].last_stable_offset,
            "opentransactions": [{"producerid": pid, "firstoffset": first,
                                  "transactionalid": name}
                                 for pid, first, name in txns[index].open],
            "cleanuppolicy": topic.policy, "mincompactionlag": lag,
            "deleteretention": retention, "mincleanabledirtyratio": ratio,
        }
        for index, p in enumerate(storage_figures([topic])[topic.pk])
    ]


def replica_rows(stream: Stream) -> list[Row]:
    """`stream replica list -path <source>`: one row per replica, in idx order."""
    links = replica_links(stream)
    pending = pending_figures(links)
    return [replica_row(link, link_status(link, pending[link.pk])) for link in links]


def replica_row(link: ReplicaLink, status: LinkStatus) -> Row:
    pending = status.pending
    return {
        "cluster": link.replica.cluster.name,
        "stream": link.replica.path,  # MapR's sample shows the replica's path here
        "type": "MapRStream",
        "replicaPath": link.replica.path,
        "replicaState": status.state,
        "paused": link.paused,
        "throttle": link.throttle,
        "idx": link.idx,
        "networkencryption": link.networkencryption,
        "synchronous": link.synchronous,
        "networkcompression": link.networkcompression,
        "isUptodate": status.up_to_date,
        "minPendingTS": pending.min_ts,
        "maxPendingTS": pending.max_ts,
        "bytesPending": pending.bytes,
        "messagesPending": pending.messages,
        "uuid": str(link.replica.uuid),
        "copyTableCompletionPercentage": status.copy_percentage,
        "errors": status.errors,
        "waitingForUpstream": not link.agreed,
        # streamgate's own: the age of the oldest unreplicated message, and whether the link
        # has a backlog yet applies nothing (a lag that looks healthy while nothing moves).
        "timeLag": status.time_lag,
        "stalled": status.stalled,
        # Continuous verification (replication/services/verify.py).
        "lastVerified": epoch_ms(link.last_verified),
        "verifiedUpTo": link.verified_upto,
        "verifyError": link.verify_error,
        # `synchronous` above is what the owner asked for; the mode is what the link does now
        # (a synchronous link drops to async by itself and returns), since when and why.
        **mode_fields(link),
    }


def mode_fields(link: ReplicaLink) -> Row:
    """A link never synchronous has always been async: no since, no reason."""
    return {"mode": SyncMode(link.mode).value, "modeSince": epoch_ms(link.mode_since),
            "modeReason": link.mode_reason}


def upstream_rows(stream: Stream) -> list[Row]:
    """`stream upstream list -path <replica>`: the sources it accepts data from."""
    upstreams = stream.upstreams.select_related("source__cluster").order_by("idx")
    return [
        {
            "cluster": upstream.source.cluster.name,
            "stream": upstream.source.path,
            "idx": upstream.idx,
            "uuid": str(upstream.source.uuid),
        }
        for upstream in upstreams
    ]


def gateway_config_rows(clusters: QuerySet[Cluster]) -> list[Row]:
    """`cluster gateway list`: destination clusters that have gateways configured."""
    names: dict[str, list[str]] = {}
    for cluster, gateway in Gateway.objects.filter(cluster__in=clusters).values_list(
        "cluster__name", "name"
    ).order_by("cluster__name", "name"):
        names.setdefault(cluster, []).append(gateway)
    return [{"cluster": cluster, "gatewayConfig": " ".join(gws)} for cluster, gws in names.items()]


def gateway_rows(cluster: Cluster) -> list[Row]:
    """`cluster gateway get -dstcluster`: one row per configured gateway, with its status from
    presence (what the replicator decides by) and the counters its heartbeats flushed."""
    gateways = list(cluster.gateways.order_by("name"))
    live = _live_gateways(cluster, gateways)
    now = timezone.now()
    return [
        {
            "cluster": cluster.name,
            "gateway": gateway.name,
            "address": gateway.address,
            "enabled": gateway.enabled,
            "status": _gateway_status(gateway, gateway.name in live),
            "lastHeartbeat": epoch_ms(gateway.last_heartbeat),
            "heartbeatAge": None if gateway.last_heartbeat is None
            else round((now - gateway.last_heartbeat).total_seconds(), 3),
            "batchesApplied": gateway.batches_applied,
            "messagesApplied": gateway.messages_applied,
            "bytesApplied": gateway.bytes_applied,
            "errors": gateway.errors,
        }
        for gateway in gateways
    ]


def _live_gateways(cluster: Cluster, gateways: list[Gateway]) -> set[str]:
    try:
        live = transport().gateways.live([(cluster.name, g.name) for g in gateways])
    except Exception:  # Redis unreachable: fall back on the database's heartbeats
        return {g.name for g in gateways if g.status == Gateway.Status.UP}
    return {name for _, name in live}


def _gateway_status(gateway: Gateway, live: bool) -> str:
    if not gateway.enabled:
        return Gateway.Status.DISABLED.value
    if live:
        return Gateway.Status.UP.value
    if gateway.last_heartbeat is None:
        return Gateway.Status.UNKNOWN.value
    return Gateway.Status.DOWN.value


def resolve_row(cluster: Cluster) -> Row:
    """`cluster gateway resolve`: only the gateways running now, as MapR does."""
    live = cluster.gateways.live().order_by("name").values_list("name", flat=True)
    return {"cluster": cluster.name, "gateways": " ".join(live)}


def cluster_rows(clusters: QuerySet[Cluster], visible: QuerySet[Stream]) -> list[Row]:
    """`cluster list`; `streams` counts only the streams in `visible` (the caller's)."""
    gateways = _count_by_cluster(Gateway.objects.all())
    live = _count_by_cluster(Gateway.objects.live())
    streams = _count_by_cluster(visible)
    return [
        {
            "name": cluster.name,
            "state": cluster.state,
            "gateways": gateways.get(cluster.pk, 0),
            "liveGateways": live.get(cluster.pk, 0),
            "streams": streams.get(cluster.pk, 0),
        }
        for cluster in clusters
    ]


def _count_by_cluster(queryset: QuerySet) -> dict[int, int]:
    # order_by() drops the models' default ordering, which would split the GROUP BY.
    counts = queryset.order_by().values("cluster").annotate(n=Count("pk", distinct=True))
    return {row["cluster"]: row["n"] for row in counts}


def job_row(job: Job, *, detail: bool = False) -> Row:
    """A bulk job as `job list` shows it; `job info` adds the result (copied figures, or the
    per-partition comparison of diffstreams)."""
    row: Row = {
        "id": job.pk, "kind": job.kind, "state": job.state,
        "src": job.source_path, "dst": job.destination_path, "percent": job.percent,
        "messagesDone": job.messages_done, "messagesTotal": job.messages_total,
        "bytesDone": job.bytes_done, "bytesTotal": job.bytes_total,
        "requestedBy": job.requested_by.get_username() if job.requested_by else "engine",
        "created": epoch_ms(job.created), "started": epoch_ms(job.started),
        "finished": epoch_ms(job.finished), "error": job.error,
    }
    if detail:
        row["options"], row["result"] = job.options, job.result
    return row


def failover_row(failover: Failover) -> Row:
    """What `stream replica failover` answers, and the API and pages show of a failover."""
    return {
        "replicaPath": failover.replica.path,
        "sourcePath": failover.source_path,
        "at": epoch_ms(failover.at),
        "forced": failover.forced,
        "sourceReachable": failover.source_reachable,
        "topics": failover.topics,
        "messagesMissing": failover.missing_messages,
        "timeMissingMs": failover.missing_ms,
        "missingFrom": failover.missing_from,
        "partitions": failover.partitions,
        "endedLinks": [f"{link['source']} -> {link['replica']}"
                       for link in failover.ended_links],
    }


def failback_rows(report: dict[str, Any]) -> list[Row]:
    """`stream replica failback`: a row per partition, then the totals."""
    rows: list[Row] = [
        {key: part[key] for key in ("topic", "partition", "commonPrefix", "keepAside", "copy")}
        for part in report["partitions"]
    ]
    rows.append({"topic": "(total)", "keepAside": report["toKeepAside"],
                 "copy": report["toCopy"], "estimatedSeconds": report["estimatedSeconds"],
                 "keptAside": report["keptAside"], "dryrun": report["dryrun"],
                 "reverse": report["reverse"]})
    return rows


def cursor_rows(cursors: list[CursorStanding]) -> list[Row]:
    """`stream cursor list`."""
    return [
        {
            "consumergroup": c.group, "topic": c.topic, "partitionid": c.partition,
            "produceroffset": c.produced_offset, "committedoffset": c.committed,
            "producertimestamp": mapr_time(c.produced_ms),
            "consumertimestamp": mapr_time(c.consumed_ms),
            "consumerlagmillis": c.lag_ms,
        }
        for c in cursors
    ]
