"""stream topic create|edit|delete|list|info."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest import rows
from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Choice, Int, Ratio, Str, StreamPath
from replication import services
from replication.errors import Conflict, NotFound
from replication.models import CleanupPolicy, TimestampType
from replication.paths import validate_topic_name
from replication.services import rebalance
from replication.services.topiccompaction import COMPACTION, INHERIT_POLICY

# MapR's rule for topic list and info.
READ_PERMS = ("consumeperm", "produceperm", "topicperm", "adminperm")
PATH = StreamPath("path", "the stream, e.g. /mapr/sanfrancisco/activity", required=True)
TOPIC = Str("topic", "the topic's name", required=True)
TOPIC_OPTIONS = (
    Int("partitions", "number of partitions (default: the stream's defaultpartitions)"),
    Choice("timestamptype", "createtime or logappendtime (default: the stream's)",
           choices=tuple(TimestampType.values)),
    # Per-topic compaction (Kafka's topic configs; docs/operations.md): without them, the
    # stream's -compact, -mincompactionlag, -deleteretention, -mincleanabledirtyratio.
    Choice("cleanuppolicy", "compact (latest message per key, the stream's ttl not applied), "
           "delete, compact,delete, or stream: the stream's -compact (default)",
           choices=(*CleanupPolicy.values, INHERIT_POLICY)),
    Int("mincompactionlag", "ms a message stays uncompacted; -1: the stream's (default)",
        min=-1),
    Int("deleteretention", "ms a tombstone is kept once compaction reaches it; -1: the "
        "stream's (default)", min=-1),
    Ratio("mincleanabledirtyratio", "share of a partition not yet compacted before a pass "
          "runs; -1: the stream's (default)", inherit=True),
)


@command("stream/topic/create", PATH, TOPIC, *TOPIC_OPTIONS,
         summary="Create a topic (needs topicperm).", changes=True)
def topic_create(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.topic_create(actor=user, stream=stream_at(user, opts), name=opts["topic"],
                          partitions=opts["partitions"], timestamptype=opts["timestamptype"],
                          **{name: opts[name] for name in COMPACTION})


@command("stream/topic/edit", PATH, TOPIC, *TOPIC_OPTIONS,
         summary="Add partitions to a topic or change its timestamp type or compaction "
                 "(needs topicperm).",
         changes=True)
def topic_edit(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.topic_edit(actor=user, stream=stream_at(user, opts), name=opts["topic"],
                        partitions=opts["partitions"], timestamptype=opts["timestamptype"],
                        **{name: opts[name] for name in COMPACTION})


@command("stream/topic/delete", PATH, TOPIC,
         summary="Delete a topic, at its origin and on its replicas (needs topicperm).",
         changes=True)
def topic_delete(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.topic_delete(actor=user, stream=stream_at(user, opts), name=opts["topic"])


@command("stream/topic/list", PATH, summary="List a stream's topics.", changes=False)
def topic_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *READ_PERMS, action="list topics")
    return rows.topic_rows(stream)


@command("stream/topic/info", PATH, TOPIC, summary="Show a topic's partitions.", changes=False)
def topic_info(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *READ_PERMS, action="see topic information")
    name = validate_topic_name(opts["topic"])
    topic = stream.topics.filter(name=name).first()
    if topic is None:
        raise NotFound(f"topic {stream.path}:{name} does not exist: list topics with "
                       f"'streamgate stream topic list -path {stream.path}'", field="topic")
    return rows.partition_rows(topic)


@command("stream/topic/partition/move", PATH, TOPIC,
         Int("partition", "the partition to move", required=True, min=0),
         Str("to", "the store group to move it to (see cluster store list)", required=True),
         Int("throttle", "at most this many bytes copied per second (default: no limit)",
             min=1),
         Bool("wait", "true (default): answer when the move is done, with its result; false: "
              "answer at once with the queued move's row (its id, state and percent: cluster "
              "store rebalancestatus -id follows it)", default=True),
         summary="Move a partition to another store group of its cluster while clients go on "
                 "producing and consuming, as a background run with progress (operators "
                 "only).",
         changes=True)
def partition_move(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    run = rebalance.partition_move_start(
        actor=user, stream=stream_at(user, opts), topic=opts["topic"],
        partition=opts["partition"], to=opts["to"], throttle=opts["throttle"])
    if not opts["wait"]:
        return [run]
    ended = rebalance.rebalance_wait(actor=user, cluster=run["cluster"], id=run["id"])
    if ended["result"] is None:
        raise Conflict(f"move #{ended['id']} {ended['state']}: {ended['error']}; see where "
                       "the partition is with cluster store list")
    return [ended["result"]]
