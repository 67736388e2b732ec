"""`streamgate`: maprcli's syntax over streamgate's REST interface.

    streamgate stream replica add -path /mapr/sanfrancisco/activity \\
        -replica /mapr/newyork/activity -paused true

Leading words name the command, then `-option value` pairs. `-json` prints the raw envelope,
`-noheader` drops the table's header row, `-long` is accepted (values are never shortened),
`-help` describes the command (as do `streamgate help [words]` and `streamgate <group> help`;
they need no server: streamgate/help.py).
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
from datetime import datetime
from typing import Any, TextIO

from streamgate import help as helpdoc
from streamgate import jobs, messaging
from streamgate.client import Client, CommandError, Row, ServerUnreachable, data_of

DEFAULT_URL = "http://127.0.0.1:8000"
LOCAL_FLAGS = ("json", "noheader", "long", "help")  # maprcli's flags; they take no value
VALUELESS = ("detail",)  # sent to the server as "true" when no true/false follows (maprcli's)
BOOL_WORDS = ("true", "false", "yes", "no", "1", "0")
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 2


UsageError = messaging.UsageError


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


def help_text(words: list[str]) -> str:
    """Offline help: a command's options, or the commands starting with `words`."""
    row = helpdoc.find(words)
    if row is not None:
        return helpdoc.detail(row)
    text = helpdoc.listing(words)
    if text is None:
        name = " ".join(words)
        hint = helpdoc.did_you_mean(name, [row["command"] for row in helpdoc.all_commands()])
        raise CommandError(errno.ENOENT, f"no command starts with '{name}':{hint} "
                           "'streamgate help' lists them all")
    return text


def wants_help(invocation: Invocation) -> list[str] | None:
    """The words to describe when the invocation asks for help, else None."""
    words = invocation.words
    if "help" in invocation.flags:
        return words
    if not words:
        return []
    if words[0] == "help":
        return words[1:]
    if words[-1] == "help":
        return words[:-1]
    if not invocation.params and helpdoc.is_group(words):
        return words  # `streamgate stream replica`: a group, not a command
    return None


def run(invocation: Invocation, client: Client, out: TextIO) -> int:
    words = invocation.words
    asked = wants_help(invocation)
    if asked is not None:
        print(help_text(asked), file=out)
        return EXIT_OK
    if words == ["produce"]:
        messaging.produce(client, invocation.params, sys.stdin, out)
        return EXIT_OK
    if words == ["consume"]:
        messaging.consume(client, invocation.params, out)
        return EXIT_OK
    if words in (["copystream"], ["diffstreams"], ["stream", "replica", "autosetup"],
                 ["stream", "replica", "repair"]):
        return jobs.follow(client, " ".join(words), invocation.params, out,
                           as_json="json" in invocation.flags)
    if words == jobs.MOVE.split() and "json" not in invocation.flags \
            and waits(invocation.params):
        print(table([jobs.follow_move(client, invocation.params, out)],
                    header="noheader" not in invocation.flags), file=out)
        return EXIT_OK
    if " ".join(words) in jobs.RUNS and "json" not in invocation.flags and out.isatty():
        print(table([jobs.follow_rebalance(client, " ".join(words), invocation.params, out)],
                    header="noheader" not in invocation.flags), file=out)
        return EXIT_OK
    if words in (["gateway", "run"], ["replicator", "run"], ["kafka", "run"]):
        return run_server_process(words[0], invocation.params)
    params = schema_from_file(words, invocation.params)
    envelope = client.request(" ".join(words), params)
    if "json" in invocation.flags:
        print(json.dumps(envelope, indent="\t"), file=out)
        return EXIT_OK if envelope.get("status") == "OK" else EXIT_FAILED
    rows = data_of(envelope)
    if rows:  # action commands return no rows and print nothing, as maprcli does
        print(table(rows, header="noheader" not in invocation.flags), file=out)
    return EXIT_OK


def waits(params: dict[str, str]) -> bool:
    """Whether a -wait option left to the server would be true (its default); a value it
    would refuse goes to it, to be refused in its words."""
    return params.get("wait", "true").strip().lower() in ("true", "yes", "1")


def schema_from_file(words: list[str], params: dict[str, str]) -> dict[str, str]:
    """`schema register|check -schema FILE|TEXT`: the file's text when it names a file. A
    schema text is JSON (Avro, JSON Schema) or has spaces (.proto), so one word that is no
    JSON and no file is a file name mistyped, refused here rather than sent as a schema."""
    value = params.get("schema")
    if words not in (["schema", "register"], ["schema", "check"]) or value is None:
        return params
    if os.path.isfile(value):
        try:
            with open(value, encoding="utf-8") as file:
                return {**params, "schema": file.read()}
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"-schema {value}: cannot read the file ({error})") from None
    word = value.strip()
    if word and not word.startswith(("{", "[", '"')) and not any(c.isspace() for c in word):
        raise UsageError(f"-schema {value}: no such file; give a schema file or the schema "
                         "text itself")
    return params


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


def error_envelope(error_id: int, desc: str) -> Row:
    """maprcli's error envelope, for errors found before (or without) an answer from the
    server, so `-json` callers read one shape whatever failed."""
    now = datetime.now().astimezone()
    return {"timestamp": int(now.timestamp() * 1000),
            "timeofday": f"{now:%Y-%m-%d %I:%M:%S}.{now.microsecond // 1000:03d} "
                         f"GMT{now:%z} {now:%p}",
            "status": "ERROR", "errors": [{"id": error_id, "desc": desc}]}


def fail(error_id: int, desc: str, as_json: bool, envelope: Row | None = None) -> int:
    if as_json:
        print(json.dumps(envelope or error_envelope(error_id, desc), indent="\t"))
    else:
        print(f"ERROR ({error_id}) - {desc}", file=sys.stderr)
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    url = os.environ.get("STREAMGATE_URL") or DEFAULT_URL
    token = os.environ.get("STREAMGATE_TOKEN")
    as_json = "-json" in args  # until the arguments parse; then the parsed flag decides
    try:
        invocation = parse_args(args)
        as_json = "json" in invocation.flags
        return run(invocation, Client(url, token), sys.stdout)
    except UsageError as error:
        return fail(errno.EINVAL, str(error), as_json)
    except CommandError as error:
        code = fail(error.id, error.desc, as_json, error.envelope)
        if error.id == errno.EACCES and not token:
            print("hint: set STREAMGATE_TOKEN to your API token", file=sys.stderr)
        return code
    except ServerUnreachable as error:
        print(f"streamgate: cannot reach the server at {url} (set STREAMGATE_URL to the "
              f"portal's address): {error.reason}", file=sys.stderr)
        return EXIT_UNREACHABLE
