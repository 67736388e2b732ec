"""A small client for streamgate's maprcli-style REST interface (/rest).

    client = Client("http://127.0.0.1:8000", token)
    client.call("stream replica add", {"path": src, "replica": dst, "paused": True})

Plain `requests`, no Django, so scripts and the CLI can use it anywhere.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
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


class Client:
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
            # POST with a form body: ACEs can be long, and query strings end up in logs.
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


def data_of(envelope: Row) -> list[Row]:
    if envelope.get("status") == "OK":
        return list(envelope.get("data", []))
    errors = envelope.get("errors") or [{"id": errno.EPROTO, "desc": "error without details"}]
    raise CommandError(errors[0].get("id", 0), errors[0].get("desc", ""), envelope)
