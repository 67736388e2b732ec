"""The command registry: maprcli command paths ("stream/replica/add") mapped to handlers and
their option specs. Handler modules register themselves with @command."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.options import Option, parse_options
from replication.models import Stream

Row = dict[str, Any]
# Any one of a stream's five permissions lets a user read about it (MapR's rule for `stream
# info`); consumeperm first, since it is the one to ask for when a reader is refused.
ANY_PERM = ("consumeperm", "produceperm", "topicperm", "copyperm", "adminperm")
Handler = Callable[[AbstractBaseUser, dict[str, Any]], list[Row] | None]


@dataclass(frozen=True)
class Command:
    path: str  # as in the URL: "stream/replica/add"
    handler: Handler
    options: tuple[Option, ...]
    summary: str
    # True when running the command can change anything (data, settings, jobs started):
    # such commands refuse GET, which cross-site pages can make a signed-in browser send.
    changes: bool

    @property
    def name(self) -> str:
        """As typed on the command line: "stream replica add"."""
        return self.path.replace("/", " ")

    def run(self, user: AbstractBaseUser, raw: Mapping[str, str]) -> list[Row]:
        return self.handler(user, parse_options(self.options, raw, self.name)) or []

    def describe(self) -> Row:
        return {
            "command": self.name,
            "usage": " ".join(filter(None, (option.usage() for option in self.options))),
            "help": self.summary,
            "options": [option.describe() for option in self.options],
        }


REGISTRY: dict[str, Command] = {}


def command(path: str, *options: Option, summary: str,
            changes: bool) -> Callable[[Handler], Handler]:
    """Register a command. `changes` has no default: every command says whether it only
    reads (GET or POST) or may change something (POST or DELETE only)."""
    if not isinstance(changes, bool):
        raise TypeError(f"command {path}: changes must be True or False, not {changes!r}")

    def register(handler: Handler) -> Handler:
        if path in REGISTRY:
            raise RuntimeError(f"command {path} registered twice")
        REGISTRY[path] = Command(path, handler, options, summary, changes)
        return handler

    return register


def stream_at(user: AbstractBaseUser, opts: Mapping[str, Any], field: str = "path") -> Stream:
    """The stream named by option `field`, through the tenant-scoping choke point: another
    tenant's stream reads exactly like a missing one."""
    return Stream.objects.restrict(user).by_path(opts[field], field=field)


def given(opts: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """The options among `names` the caller gave, for services that treat absence as
    "leave as is" or "use the default"."""
    return {name: opts[name] for name in names if opts.get(name) is not None}
