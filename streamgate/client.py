"""A small client for streamgate: its maprcli-style interface (/rest) and messages (/api/v1).

    client = Client("http://127.0.0.1:8000", token)
    client.call("stream replica add", {"path": src, "replica": dst, "paused": True})
    client.produce("/mapr/sanfrancisco/activity", "clicks", [{"value": b"hello"}])
    client.consume("/mapr/sanfrancisco/activity", "clicks", partition=0, offset=0)

Plain `requests`, no Django, so scripts and the CLI can use it anywhere.
"""

from __future__ import annotations

import base64
import errno
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import requests

Row = dict[str, Any]


class CommandError(Exception):
    """The server refused the command: `id` and `desc` are maprcli's error fields."""

    def __init__(self, id: int, desc: str, envelope: Row | None = None) -> None:
        super().__init__(f"ERROR ({id}) - {desc}")
        self.id = id
        self.desc = desc
        self.envelope = envelope


class ServerUnreachable(Exception):
    """No answer from the server at all (refused, timed out, bad address)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the streamgate server at {url}: {reason}")
        self.url = url
        self.reason = reason


def command_url_path(command_path: str) -> str:
    """"stream replica add" or "stream/replica/add" -> "stream/replica/add"."""
    return "/".join(word for word in re.split(r"[\s/]+", command_path) if word)


def _text(value: Any) -> str:
    # maprcli spells booleans true/false; str(True) would send "True", which also works but
    # reads oddly in server logs.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# HTTP statuses of /api/v1 errors, as the errno maprcli would report (503: try again, as
# /rest's envelope says for the same outage).
ERRNO_OF_STATUS = {400: errno.EINVAL, 401: errno.EACCES, 403: errno.EPERM, 404: errno.ENOENT,
                   409: errno.EEXIST, 501: errno.EOPNOTSUPP, 503: errno.EAGAIN}


def _b64(raw: bytes | str | None) -> str | None:
    """Bytes (or text, as UTF-8) in base64; None stays None: Kafka's null, apart from b""."""
    if raw is None:
        return None
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_record(record: Mapping[str, Any]) -> Row:
    """A record with bytes (or str) key, value and header values, for the produce body; a
    value of None is a null value (a tombstone), b"" an empty one."""
    body: Row = {"value": _b64(record["value"])}
    if record.get("key") is not None:
        body["key"] = _b64(record["key"])
    if record.get("headers"):
        body["headers"] = {k: _b64(v) for k, v in record["headers"].items()}
    for name in ("partition", "timestamp"):
        if record.get(name) is not None:
            body[name] = record[name]
    return body


def decode_message(message: Row) -> Row:
    """A consumed message with key, value and header values back as bytes (None: null)."""
    return {
        **message,
        "key": _unb64(message["key"]),
        "value": _unb64(message["value"]),
        "headers": {k: _unb64(v) for k, v in message["headers"].items()},
    }


class MessagesMixin:
    """Produce, consume and cursors over /api/v1, addressing streams by path as MapR does."""

    url: str
    session: requests.Session
    timeout: float

    def api(self, method: str, path: str, **kwargs: Any) -> Row:
        try:
            response = self.session.request(method, f"{self.url}/api/v1/{path}",
                                            timeout=self.timeout, **kwargs)
        except requests.RequestException as err:
            raise ServerUnreachable(self.url, str(err)) from err
        try:
            body = response.json()
        except ValueError:
            body = {"detail": f"HTTP {response.status_code} without a JSON body"}
        if response.status_code >= 400:
            raise CommandError(ERRNO_OF_STATUS.get(response.status_code, errno.EIO),
                               _detail(body))
        return body

    @cache  # noqa: B019 - a client lives as long as one script; paths never move
    def stream_uuid(self, path: str) -> str:
        found = self.api("GET", "streams/", params={"path": path})["results"]
        if not found:
            raise CommandError(errno.ENOENT, f"stream {path} does not exist")
        return found[0]["uuid"]

    def _topic_url(self, path: str, topic: str, what: str) -> str:
        return f"streams/{self.stream_uuid(path)}/topics/{topic}/{what}/"

    def produce(self, path: str, topic: str, records: Sequence[Mapping[str, Any]], *,
                producer: str | None = None) -> list[Row]:
        """[{"partition", "offset"}] for each record, in order."""
        body = {"encoding": "base64", "records": [encode_record(r) for r in records]}
        if producer:
            body["producer"] = producer
        return self.api("POST", self._topic_url(path, topic, "messages"), json=body)["offsets"]

    def consume(self, path: str, topic: str, *, partition: int = 0, offset: int = 0,
                limit: int = 1000, max_bytes: int = 1 << 20, wait_ms: int = 0) -> list[Row]:
        params = {"partition": partition, "offset": offset, "limit": limit,
                  "max_bytes": max_bytes, "wait_ms": wait_ms, "encoding": "base64"}
        body = self.api("GET", self._topic_url(path, topic, "messages"), params=params)
        return [decode_message(m) for m in body["messages"]]

    def commit(self, path: str, topic: str, *, group: str, partition: int, offset: int) -> None:
        self.api("POST", self._topic_url(path, topic, "cursors"),
                 json={"group": group, "partition": partition, "offset": offset})

    def committed(self, path: str, topic: str, *, group: str, partition: int) -> int | None:
        return self.committed_all(path, topic, group=group).get(partition)

    def committed_all(self, path: str, topic: str, *, group: str) -> dict[int, int]:
        """The group's committed offset of each partition that has one."""
        cursors = self.api("GET", self._topic_url(path, topic, "cursors"),
                           params={"group": group})["cursors"]
        return {c["partition"]: c["offset"] for c in cursors}

    def partitions(self, path: str, topic: str) -> int:
        """How many partitions the topic has."""
        return int(self.api("GET", f"streams/{self.stream_uuid(path)}/topics/{topic}/")
                   ["partitions"])


def _detail(body: Any) -> str:
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}"
                     for k, v in body.items()) if isinstance(body, dict) else str(body)


def data_of(envelope: Row) -> list[Row]:
    if envelope.get("status") == "OK":
        return list(envelope.get("data", []))
    errors = envelope.get("errors") or [{"id": errno.EPROTO, "desc": "error without details"}]
    raise CommandError(errors[0].get("id", 0), errors[0].get("desc", ""), envelope)


class Client(MessagesMixin):
    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Token {token}"
        self.has_token = bool(token)

    def request(self, command_path: str, params: Mapping[str, Any] | None = None) -> Row:
        """The raw envelope, success or error; raises only when there is no envelope."""
        url = f"{self.url}/rest/{command_url_path(command_path)}"
        data = {key: _text(value) for key, value in (params or {}).items()}
        try:
            # POST with a form body for every command: the server refuses GET for those that
            # change anything, ACEs can be long, and query strings end up in logs.
            response = self.session.post(url, data=data, timeout=self.timeout)
        except requests.RequestException as err:
            raise ServerUnreachable(self.url, str(err)) from err
        try:
            envelope = response.json()
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict) or "status" not in envelope:
            raise CommandError(errno.EPROTO, f"{url} answered HTTP {response.status_code} "
                               "without a streamgate envelope: is STREAMGATE_URL right?")
        return envelope

    def call(self, command_path: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """The command's rows; raises CommandError on an error envelope."""
        return data_of(self.request(command_path, params))

    def commands(self) -> list[Row]:
        """The server's command registry: command, usage, help and options of each."""
        return self.call("")
