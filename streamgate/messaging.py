"""`streamgate produce` and `streamgate consume`: messages from stdin, messages as JSON lines.

    printf 'one\\ntwo\\n' | streamgate produce -path /mapr/sanfrancisco/activity -topic clicks
    streamgate consume -path /mapr/sanfrancisco/activity:clicks -offset 0 -limit 10

The topic may be given with -topic or as MapR writes it, `<stream path>:<topic>`.
"""

from __future__ import annotations

import base64
import errno
import heapq
import itertools
import json
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from streamgate.client import Client, CommandError, Row

BATCH = 1000
# The server's refusal of an offset below a partition's first retained one.
EXPIRED = re.compile(r"valid offsets are (\d+)\.\.\d+")
POLL = 0.05  # seconds between polls of the partitions while -wait waits for a first message
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
    """Print what is there from -offset (or the group's committed cursors) up to -limit: one
    partition with -partition, else every partition merged by timestamp, as kcat does."""
    _check(params, CONSUME_OPTIONS, "consume")
    path, topic = stream_and_topic(params)
    only = _number(params, "partition", None)
    parts = [only] if only is not None else list(range(client.partitions(path, topic)))
    group, limit = params.get("group"), _number(params, "limit", None)
    starts = start_offsets(client, path, topic, parts, group, _number(params, "offset", None))
    wait = _number(params, "wait", 0) or 0
    earliest = "offset" not in params
    if len(parts) > 1 and wait:
        await_first(client, path, topic, starts, wait, earliest=earliest)
        wait = 0
    chunk = BATCH if limit is None else max(1, min(BATCH, limit))
    feeds = [partition_feed(client, path, topic, p, starts[p], chunk, wait, earliest=earliest)
             for p in parts]
    merged = heapq.merge(*feeds, key=lambda m: (m["timestamp"], m["partition"], m["offset"]))
    committer = Committer(client, path, topic, group, starts)
    printed = 0
    for message in itertools.islice(merged, limit):
        print(line_of(message), file=out)
        printed += 1
        committer.advance(message)
    committer.flush()
    return printed


def start_offsets(client: Client, path: str, topic: str, parts: list[int], group: str | None,
                  offset: int | None) -> dict[int, int]:
    """-offset in every partition, else the group's committed cursor, else 0."""
    if offset is not None:
        return dict.fromkeys(parts, offset)
    committed = client.committed_all(path, topic, group=group) if group else {}
    return {p: committed.get(p, 0) for p in parts}


def partition_feed(client: Client, path: str, topic: str, partition: int, offset: int,
                   chunk: int, wait_ms: int, *, earliest: bool = False) -> Iterator[Row]:
    """One partition's messages from `offset`, fetched a chunk at a time as the merge asks.
    With `earliest` (the start was not given with -offset), a start below what the partition
    still holds (retention or purge deleted it) moves up to its first retained message, as
    Kafka consumers do with auto.offset.reset=earliest."""
    while True:
        try:
            messages = client.consume(path, topic, partition=partition, offset=offset,
                                      limit=chunk, wait_ms=wait_ms)
        except CommandError as error:
            low = expired_below(error) if earliest else None
            if low is None or low <= offset:
                raise
            offset, earliest = low, False
            continue
        if not messages:
            return
        yield from messages
        offset, wait_ms = messages[-1]["offset"] + 1, 0


def expired_below(error: CommandError) -> int | None:
    """The first retained offset named by the server's out-of-range refusal, if it is one."""
    found = EXPIRED.search(error.desc) if error.id == errno.EINVAL else None
    return int(found.group(1)) if found else None


def await_first(client: Client, path: str, topic: str, starts: dict[int, int],
                wait_ms: int, *, earliest: bool) -> None:
    """-wait over several partitions: poll them in turn until one has a message or the time
    is up (a long poll on one partition would miss a message arriving on another)."""
    deadline = time.monotonic() + wait_ms / 1000
    while time.monotonic() < deadline:
        for partition in starts:
            feed = partition_feed(client, path, topic, partition, starts[partition], 1, 0,
                                  earliest=earliest)
            if next(feed, None) is not None:
                return
        time.sleep(POLL)


class Committer:
    """With -group, commits each partition's cursor past what was printed: every BATCH lines
    and at the end, so an interrupted consume resumes where its output stopped."""

    def __init__(self, client: Client, path: str, topic: str, group: str | None,
                 starts: dict[int, int]) -> None:
        self.client, self.path, self.topic, self.group = client, path, topic, group
        self.next = dict(starts)
        self.dirty: set[int] = set()
        self.printed = 0

    def advance(self, message: Row) -> None:
        self.next[message["partition"]] = message["offset"] + 1
        self.dirty.add(message["partition"])
        self.printed += 1
        if self.printed % BATCH == 0:
            self.flush()

    def flush(self) -> None:
        if not self.group:
            return
        for partition in sorted(self.dirty):
            self.client.commit(self.path, self.topic, group=self.group, partition=partition,
                               offset=self.next[partition])
        self.dirty.clear()
