"""`streamgate produce` and `streamgate consume`: messages from stdin, messages as JSON lines.

    printf 'one\\ntwo\\n' | streamgate produce -path /mapr/sanfrancisco/activity -topic clicks
    streamgate consume -path /mapr/sanfrancisco/activity:clicks -offset 0 -limit 10

The topic may be given with -topic or as MapR writes it, `<stream path>:<topic>`.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from streamgate.client import Client, Row

BATCH = 1000
PRODUCE_OPTIONS = {"path", "topic", "partition", "key", "format", "producer"}
CONSUME_OPTIONS = {"path", "topic", "partition", "offset", "limit", "group", "wait"}


class UsageError(Exception):
    pass


def _check(params: dict[str, str], allowed: set[str], command: str) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        valid = ", ".join(f"-{name}" for name in sorted(allowed))
        raise UsageError(f"unknown option -{unknown[0]} for '{command}': valid options are {valid}")


def _number(params: dict[str, str], name: str, default: int | None) -> int | None:
    raw = params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise UsageError(f"-{name} {raw!r} is not a whole number, 0 or more")
    return int(raw)


def stream_and_topic(params: dict[str, str]) -> tuple[str, str]:
    path, topic = params.get("path"), params.get("topic")
    if not path:
        raise UsageError("-path is required: a stream path such as /mapr/sanfrancisco/activity")
    if topic is None and ":" in path:
        path, topic = path.rsplit(":", 1)
    if not topic:
        raise UsageError("-topic is required (or write -path <stream>:<topic>)")
    return path, topic


def records_from(lines: Iterable[str], params: dict[str, str]) -> Iterator[dict[str, Any]]:
    fmt = params.get("format", "text")
    if fmt not in ("text", "json"):
        raise UsageError(f"-format {fmt!r} is not one of text, json")
    defaults = {"key": params.get("key"), "partition": _number(params, "partition", None)}
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\n")
        if fmt == "text":
            yield {**defaults, "value": text}
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"line {number} is not JSON: {err}") from err
        if not isinstance(record, dict) or "value" not in record:
            raise UsageError(f"line {number}: a JSON record is an object with a \"value\"")
        yield {**defaults, **record}


def produce(client: Client, params: dict[str, str], stdin: TextIO, out: TextIO) -> int:
    _check(params, PRODUCE_OPTIONS, "produce")
    path, topic = stream_and_topic(params)
    records, total = records_from(stdin, params), 0
    while batch := list(itertools.islice(records, BATCH)):
        placed = client.produce(path, topic, batch, producer=params.get("producer"))
        for offset in placed:
            print(json.dumps(offset), file=out)
        total += len(placed)
    return total


def printable(raw: bytes | None) -> tuple[str | None, bool]:
    """Text when the bytes are UTF-8, else base64 (and say so)."""
    if raw is None:
        return None, False
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), True


def line_of(message: Row) -> str:
    key, key_b64 = printable(message["key"])
    value, value_b64 = printable(message["value"])
    row: Row = {"partition": message["partition"], "offset": message["offset"],
                "timestamp": message["timestamp"], "key": key, "value": value}
    if message["headers"]:
        row["headers"] = {k: printable(v)[0] for k, v in message["headers"].items()}
    if key_b64 or value_b64:
        row["encoding"] = "base64"
    return json.dumps(row, ensure_ascii=False)


def consume(client: Client, params: dict[str, str], out: TextIO) -> int:
    """Print what is there from -offset (or the group's committed cursor) up to -limit."""
    _check(params, CONSUME_OPTIONS, "consume")
    path, topic = stream_and_topic(params)
    partition = _number(params, "partition", 0)
    group, limit = params.get("group"), _number(params, "limit", None)
    offset = _number(params, "offset", None)
    if offset is None:
        committed = group and client.committed(path, topic, group=group, partition=partition)
        offset = committed or 0
    wait, printed = _number(params, "wait", 0), 0
    while limit is None or printed < limit:
        chunk = BATCH if limit is None else min(BATCH, limit - printed)
        messages = client.consume(path, topic, partition=partition, offset=offset,
                                  limit=chunk, wait_ms=wait if printed == 0 else 0)
        if not messages:
            break
        for message in messages:
            print(line_of(message), file=out)
        printed += len(messages)
        offset = messages[-1]["offset"] + 1
        if group:
            client.commit(path, topic, group=group, partition=partition, offset=offset)
    return printed
