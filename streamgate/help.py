"""`streamgate help`, `streamgate <group> help` and `streamgate <command> -help`, with no
server: the usage text comes from files shipped with the command line.

- `commands.json` (beside this module) describes the server's /rest commands. It is
  generated from the server's registry (`make clihelp`, i.e. `python -m portal.rest.clihelp`),
  and tests/streamgate/test_help.py fails when it and the registry differ, naming the fix.
- LOCAL_COMMANDS below describes the words the command line runs itself (produce, consume,
  the server processes). A new local word gets an entry here, in the same shape.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

Row = dict[str, Any]
USAGE = "usage: streamgate <command> [-option value]... [-json] [-noheader] [-help]"


def usage_of(option: Row) -> str:
    """An option as the usage line shows it; options refused with a reason are left out."""
    metavar = {
        "boolean": "true|false", "integer": "<number>", "number": "<number>",
        "stream path": "<stream path>",
        "access control expression": "<ACE>", "choice": "|".join(option.get("choices", ())),
    }.get(option["type"], "<text>")
    if option["type"] == "not supported":
        return ""
    text = f"-{option['name']} {metavar}"
    return text if option["required"] else f"[ {text} ]"


def _opt(name: str, summary: str, *, kind: str = "text", required: bool = False,
         choices: tuple[str, ...] = ()) -> Row:
    row: Row = {"name": name, "type": kind, "required": required, "default": None,
                "help": summary}
    if choices:
        row["choices"] = list(choices)
    return row


def _local(command: str, summary: str, *options: Row) -> Row:
    return {"command": command, "usage": " ".join(usage_of(o) for o in options),
            "help": summary, "options": list(options)}


LOCAL_COMMANDS: list[Row] = [
    _local("produce", "Produce one message per line of standard input (JSON records with "
           "-format json); prints each message's partition and offset.",
           _opt("path", "the stream, or <stream path>:<topic>", kind="stream path",
                required=True),
           _opt("topic", "the topic (or give it in -path)"),
           _opt("partition", "the partition (default: by key; without a key, sticky round "
                "robin: up to 1,000 messages to one partition, then the next)",
                kind="integer"),
           _opt("key", "the key of every message"),
           _opt("format", "text: one message a line; json: {\"value\", \"key\", "
                "\"partition\", \"headers\"} a line", kind="choice", choices=("text", "json")),
           _opt("producer", "an idempotent producer id: a retried line is written once")),
    _local("consume", "Print messages as JSON lines. Without -partition, every partition of "
           "the topic, merged by timestamp (each line names its partition); with -group, each "
           "partition starts at and commits the group's cursor.",
           _opt("path", "the stream, or <stream path>:<topic>", kind="stream path",
                required=True),
           _opt("topic", "the topic (or give it in -path)"),
           _opt("partition", "only this partition (default: all of them)", kind="integer"),
           _opt("offset", "start offset in every partition read (default: the group's cursor, "
                "else the earliest)", kind="integer"),
           _opt("limit", "stop after this many messages in all (default: what is there)",
                kind="integer"),
           _opt("group", "consumer group: start at its committed cursors and commit them"),
           _opt("wait", "milliseconds to wait for a first message (default 0)",
                kind="integer")),
    _local("gateway run", "Run a configured gateway of the cluster in this process "
           "(production: DATABASE_URL and REDIS_URL set), applying replicated batches.",
           _opt("cluster", "the destination cluster", required=True),
           _opt("name", "the gateway's name, as in 'cluster gateway set'", required=True)),
    _local("replicator run", "Run the source side of replication in this process "
           "(production)."),
    _local("kafka run", "Run a Kafka listener (default 127.0.0.1:9092): Kafka clients connect "
           "with SASL/PLAIN, your user name and an API token.",
           _opt("listen", "HOST:PORT to listen on"),
           _opt("advertise", "HOST:PORT clients are told to connect to"),
           _opt("cluster", "serve this cluster's streams only"),
           _opt("defaultstream", "where plain topic names live on a single-tenant site",
                kind="stream path")),
]


@cache
def server_commands() -> list[Row]:
    return json.loads(resources.files("streamgate").joinpath("commands.json").read_text())


def all_commands() -> list[Row]:
    return sorted([*server_commands(), *LOCAL_COMMANDS], key=lambda row: row["command"])


def find(words: list[str]) -> Row | None:
    name = " ".join(words)
    return next((row for row in all_commands() if row["command"] == name), None)


def did_you_mean(name: str, names: list[str]) -> str:
    """" Did you mean 'stream list'?" for a mistyped command among `names`, else ""."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f" did you mean '{close[0]}'?" if close else ""


def is_group(words: list[str]) -> bool:
    """True for leading words of commands that are not a command themselves ("stream")."""
    prefix = " ".join(words) + " "
    return find(words) is None and any(row["command"].startswith(prefix)
                                       for row in all_commands())


def listing(words: list[str]) -> str | None:
    """The usage lines of every command starting with `words`; None when there is none."""
    prefix = " ".join(words)
    chosen = [row for row in all_commands() if not prefix or row["command"] == prefix
              or row["command"].startswith(prefix + " ")]
    if not chosen:
        return None
    lines = [USAGE, ""]
    for row in chosen:
        lines.append(f"  {row['command']} {row['usage']}".rstrip())
        lines.append(f"      {row['help']}")
    lines += ["", "'streamgate <command> -help' describes each option of a command."]
    return "\n".join(lines)


def detail(row: Row) -> str:
    """One command: what it does, its usage line, and every option with its meaning."""
    lines = [f"{row['command']}: {row['help']}", "",
             f"usage: streamgate {row['command']} {row['usage']}".rstrip()]
    options = row["options"]
    if options:
        lines.append("")
        shown = [(f"-{o['name']} " + (usage_of(o).strip("[] ").split(" ", 1)[1]
                                       if usage_of(o) else "<value>"), o) for o in options]
        width = max(len(text) for text, _ in shown)
        for text, option in shown:
            note = option["help"] + (" (required)" if option["required"] else "")
            lines.append(f"  {text.ljust(width)}  {note}")
    return "\n".join(lines)
