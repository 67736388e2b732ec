"""Domain hints as the maprcli command line: what /rest and the `streamgate` CLI say.

The domain says what to do as a `Hint` (an action, its parameters, plain words); here each
action is the command that does it, so an error reads as it always has on the command line,
e.g. "stream /mapr/c1/x does not exist: check -path, or create it with 'streamgate stream
create -path /mapr/c1/x'". The domain itself names no command.
"""

from __future__ import annotations

from replication.errors import StreamgateError

COMMANDS = {
    "cluster.list": "streamgate cluster list",
    "stream.create": "streamgate stream create -path {path}",
    "topic.list": "streamgate stream topic list -path {path}",
    "topic.create": "streamgate stream topic create -path {path} -topic {topic}",
    "replica.list": "streamgate stream replica list -path {path}",
    "replica.add": "stream replica add",
    "replica.resume": "streamgate stream replica resume -path {path} -replica {replica}",
    "upstream.list": "streamgate stream upstream list -path {path}",
    "job.info": "streamgate job info -id {id}",
}


def command_desc(err: StreamgateError) -> str:
    """The error's text as the command line shows it: the problem, then the command to run."""
    hint = err.hint
    if hint is None or hint.action not in COMMANDS:
        return err.desc
    command = "'" + COMMANDS[hint.action].format(**hint.params) + "'"
    return f"{err.problem}: {hint.cli.format(words=hint.words, command=command)}"
