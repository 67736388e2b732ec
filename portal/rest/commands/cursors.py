"""stream cursor list|delete, stream assign list: consumer groups' committed cursors and live
assignments (Kafka groups through the listener, `streamgate consume -group`, REST)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Int, Str, StreamPath
from replication.models import Stream
from replication.services.cursors import (
    LIST_PERMS,
    _filters,
    cursor_delete,
    cursor_report,
)
from workers.models import KafkaGroup

PATH = StreamPath("path", "the stream, e.g. /mapr/sanfrancisco/activity", required=True)
FILTERS = (
    Str("consumergroup", "only this consumer group"),
    Str("topic", "only this topic"),
    Int("partition", "only this partition (needs -topic)"),
)


@command("stream/cursor/list", PATH, *FILTERS,
         summary="List consumer groups' committed cursors, with the latest offset beside each.")
def cursor_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return cursor_report(actor=user, stream=stream_at(user, opts), group=opts["consumergroup"],
                         topic=opts["topic"], partition=opts["partition"])


@command("stream/cursor/delete", PATH, *FILTERS,
         summary="Delete committed cursors (needs consumeperm or adminperm); a consumer group "
                 "without one starts where its auto.offset.reset says.")
def cursor_delete_command(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    cursor_delete(actor=user, stream=stream_at(user, opts), group=opts["consumergroup"],
                  topic=opts["topic"], partition=opts["partition"])


@command("stream/assign/list", PATH, *FILTERS,
         Bool("detail", "add each group's state, generation, protocol and leader"),
         summary="List Kafka consumer groups' members and the partitions each is assigned.")
def assign_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *LIST_PERMS, action="list consumer assignments")
    _filters(stream, opts["topic"], opts["partition"])
    groups = KafkaGroup.objects.filter(tenant_id=stream.tenant_id, expires__gt=timezone.now())
    if opts["consumergroup"]:
        groups = groups.filter(group_id=opts["consumergroup"])
    rows: list[Row] = []
    for group in groups:
        rows += _assignment_rows(group, stream, opts)
    return rows


def _assignment_rows(group: KafkaGroup, stream: Stream, opts: dict[str, Any]) -> list[Row]:
    state, rows = group.state, []
    for member in state.get("members", []):
        for part in member.get("partitions", []):
            if part["stream"] != str(stream.uuid):
                continue
            if opts["topic"] and part["topic"] != opts["topic"]:
                continue
            if opts["partition"] is not None and part["partition"] != opts["partition"]:
                continue
            row = {"consumergroup": group.group_id, "topic": part["topic"],
                   "partitionid": part["partition"], "consumerid": member["consumerid"],
                   "clientid": member["clientid"], "host": member["host"]}
            if opts["detail"]:
                row |= {"state": state["state"], "generation": state["generation"],
                        "protocol": state["protocol"], "leader": state["leader"] ==
                        member["consumerid"], "instanceid": member.get("instanceid") or ""}
            rows.append(row)
    return rows
