"""`streamgate`: maprcli's syntax over streamgate's REST interface.

    streamgate stream replica add -path /mapr/sanfrancisco/activity \\
        -replica /mapr/newyork/activity -paused true

Leading words name the command, then `-option value` pairs. `-json` prints the raw envelope,
`-noheader` drops the table's header row, `-long` is accepted (values are never shortened).
The server is STREAMGATE_URL (default http://127.0.0.1:8000), the knox token STREAMGATE_TOKEN;
they are environment variables because `-url` or `-token` could clash with command options.

Exit status: 0 success, 1 the command failed, 2 the server could not be reached.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from streamgate import jobs, messaging
from streamgate.client import Client, CommandError, Row, ServerUnreachable, data_of

DEFAULT_URL = "http://127.0.0.1:8000"
LOCAL_FLAGS = ("json", "noheader", "long")  # maprcli's output flags; they take no value
VALUELESS = ("detail",)  # sent to the server as "true" when no true/false follows (maprcli's)
BOOL_WORDS = ("true", "false", "yes", "no", "1", "0")
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 2


UsageError = messaging.UsageError
MESSAGING_HELP = """
  produce -path <stream path> -topic <topic> [ -partition <n> ] [ -key <key> ]
          [ -format text|json ] [ -producer <id> ]
      Produce one message per line of standard input (JSON records with -format json).
  consume -path <stream path> -topic <topic> [ -partition <n> ] [ -offset <o> ]
          [ -limit <n> ] [ -group <consumer group> ] [ -wait <ms> ]
      Print messages as JSON lines; with -group, start at and commit the group's cursor.
  gateway run -cluster <destination cluster> -name <gateway>
      Run a configured gateway of the cluster in this process (production: DATABASE_URL and
      REDIS_URL set), applying replicated batches to the cluster's replicas.
  replicator run
      Run the source side of replication in this process (production).
  kafka run [ -listen HOST:PORT ] [ -advertise HOST:PORT ] [ -cluster <cluster> ]
            [ -defaultstream <stream path> ]
      Run a Kafka listener (default 127.0.0.1:9092): Kafka clients connect with SASL/PLAIN,
      your user name and an API token. -cluster serves one cluster's streams only;
      -defaultstream is where plain topic names live on a single-tenant site."""


@dataclass
class Invocation:
    words: list[str]
    params: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)


def parse_args(args: Sequence[str]) -> Invocation:
    words: list[str] = []
    while len(words) < len(args) and not args[len(words)].startswith("-"):
        words.append(args[len(words)])
    invocation = Invocation(words)
    rest = list(args[len(words):])
    while rest:
        flag = rest.pop(0)
        name = flag.lstrip("-")
        if not flag.startswith("-") or not name:
            raise UsageError(f"expected an option such as -path, found {flag!r}")
        if name in LOCAL_FLAGS:
            invocation.flags.add(name)
            continue
        if name in VALUELESS and (not rest or rest[0].lower() not in BOOL_WORDS):
            rest.insert(0, "true")
        # Whatever follows an option is its value, even when it starts with '-'.
        if not rest:
            raise UsageError(f"option -{name} needs a value")
        if name in invocation.params:
            raise UsageError(f"option -{name} is given twice")
        invocation.params[name] = rest.pop(0)
    return invocation


def cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(cell(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def table(rows: list[Row], header: bool = True) -> str:
    """maprcli's tabular output: one column per key, left-aligned, two spaces apart."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = [[cell(row.get(column)) for column in columns] for row in rows]
    if header:
        lines.insert(0, columns)
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def help_text(commands: list[Row], words: list[str]) -> str:
    prefix = " ".join(words)
    chosen = [c for c in commands if c["command"] == prefix or c["command"].startswith(
        f"{prefix} " if prefix else "")]
    if not chosen:
        raise CommandError(errno.ENOENT, f"no command starts with '{prefix}'")
    lines = ["usage: streamgate <command> [-option value]... [-json] [-noheader]", ""]
    for item in chosen:
        lines.append(f"  {item['command']} {item['usage']}".rstrip())
        lines.append(f"      {item['help']}")
    return "\n".join(lines)


def run(invocation: Invocation, client: Client, out: TextIO) -> int:
    words = invocation.words
    if not words or words[0] == "help":
        print(help_text(client.commands(), words[1:]), file=out)
        print(MESSAGING_HELP, file=out)
        return EXIT_OK
    if words == ["produce"]:
        messaging.produce(client, invocation.params, sys.stdin, out)
        return EXIT_OK
    if words == ["consume"]:
        messaging.consume(client, invocation.params, out)
        return EXIT_OK
    if words in (["copystream"], ["diffstreams"]):
        return jobs.follow(client, words[0], invocation.params, out,
                           as_json="json" in invocation.flags)
    if words in (["gateway", "run"], ["replicator", "run"], ["kafka", "run"]):
        return run_server_process(words[0], invocation.params)
    envelope = client.request(" ".join(words), invocation.params)
    if "json" in invocation.flags:
        print(json.dumps(envelope, indent="\t"), file=out)
        return EXIT_OK if envelope.get("status") == "OK" else EXIT_FAILED
    rows = data_of(envelope)
    if rows:  # action commands return no rows and print nothing, as maprcli does
        print(table(rows, header="noheader" not in invocation.flags), file=out)
    return EXIT_OK


# Per process: (required options, optional options) of its `run` command.
SERVER_OPTIONS = {
    "gateway": ({"cluster", "name"}, set()),
    "replicator": (set(), set()),
    "kafka": (set(), {"listen", "advertise", "cluster", "defaultstream"}),
}


def run_server_process(kind: str, params: dict[str, str]) -> int:
    """`gateway run`, `replicator run` and `kafka run` are the server's own processes, not
    REST calls: exec the management command, so signals reach it directly."""
    required, optional = SERVER_OPTIONS[kind]
    if not required <= set(params) <= required | optional:
        needed = " ".join([f"-{name} <{name}>" for name in sorted(required)]
                          + [f"[-{name} <{name}>]" for name in sorted(optional)])
        raise UsageError(f"usage: streamgate {kind} run {needed}".rstrip())
    argv = [sys.executable, "-m", "django", f"run{kind}"]
    for name in sorted(params):
        argv += [f"--{name}", params[name]]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.execv(sys.executable, argv)
    return EXIT_FAILED  # not reached: execv replaces this process


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    url = os.environ.get("STREAMGATE_URL") or DEFAULT_URL
    token = os.environ.get("STREAMGATE_TOKEN")
    try:
        invocation = parse_args(sys.argv[1:] if argv is None else argv)
        return run(invocation, Client(url, token), out)
    except UsageError as error:
        print(f"ERROR ({errno.EINVAL}) - {error}", file=err)
        return EXIT_FAILED
    except CommandError as error:
        print(f"ERROR ({error.id}) - {error.desc}", file=err)
        if error.id == errno.EACCES and not token:
            print("hint: set STREAMGATE_TOKEN to your API token", file=err)
        return EXIT_FAILED
    except ServerUnreachable as error:
        print(f"streamgate: cannot reach the server at {url} (set STREAMGATE_URL to the "
              f"portal's address): {error.reason}", file=err)
        return EXIT_UNREACHABLE
