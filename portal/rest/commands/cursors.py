"""stream cursor list|delete, stream assign list: consumer groups' committed cursors and live
assignments (Kafka groups through the listener, `streamgate consume -group`, REST)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Int, Str, StreamPath
from portal.rest.rows import cursor_rows
from replication.groups.members import LiveGroup, live_groups
from replication.services.cursors import _filters, cursor_delete, cursor_report

PATH = StreamPath("path", "the stream, e.g. /mapr/sanfrancisco/activity", required=True)
FILTERS = (
    Str("consumergroup", "only this consumer group"),
    Str("topic", "only this topic"),
    Int("partition", "only this partition (needs -topic)"),
)


@command("stream/cursor/list", PATH, *FILTERS,
         summary="List consumer groups' committed cursors, with the latest offset beside each.",
         changes=False)
def cursor_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return cursor_rows(cursor_report(actor=user, stream=stream_at(user, opts),
                                     group=opts["consumergroup"], topic=opts["topic"],
                                     partition=opts["partition"]))


@command("stream/cursor/delete", PATH, *FILTERS,
         summary="Delete committed cursors (needs consumeperm or adminperm); a consumer group "
                 "without one starts where its auto.offset.reset says.", changes=True)
def cursor_delete_command(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    cursor_delete(actor=user, stream=stream_at(user, opts), group=opts["consumergroup"],
                  topic=opts["topic"], partition=opts["partition"])


@command("stream/assign/list", PATH, *FILTERS,
         Bool("detail", "add each group's state, generation, protocol and leader"),
         summary="List Kafka consumer groups' members and the partitions each is assigned.",
         changes=False)
def assign_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    groups = live_groups(actor=user, stream=stream, group=opts["consumergroup"])
    _filters(stream, opts["topic"], opts["partition"])
    return [row for group in groups for row in _assignment_rows(group, opts)]


def _assignment_rows(group: LiveGroup, opts: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for member in group.members:
        for topic, partition in member.partitions:
            if opts["topic"] and topic != opts["topic"]:
                continue
            if opts["partition"] is not None and partition != opts["partition"]:
                continue
            row = {"consumergroup": group.group, "topic": topic, "partitionid": partition,
                   "consumerid": member.member_id, "clientid": member.client_id,
                   "host": member.host}
            if opts["detail"]:
                row |= {"state": group.state, "generation": group.generation,
                        "protocol": group.protocol, "leader": member.leader,
                        "instanceid": member.instance_id}
            rows.append(row)
    return rows
