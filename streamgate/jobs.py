"""`streamgate copystream`, `streamgate diffstreams`, `streamgate stream replica autosetup` and
`... repair`: start the job (autosetup's is its copy step, repair's the link's diffstreams
-repair), then follow it to its end like MapR's own tools
do, with a progress line on a terminal. `stream topic partition move` is followed the same
way (a run of the cluster's, seen with `cluster store rebalancestatus -id`), and so are
`cluster store rebalance` and `drain` on a terminal (a script gets the queued run at once)."""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Mapping
from typing import TextIO

from streamgate.client import Client, CommandError, Row

POLL = 0.5  # seconds between looks at the job
ENDED = ("SUCCEEDED", "FAILED")


def follow(client: Client, command: str, params: dict[str, str], out: TextIO, *,
           as_json: bool) -> int:
    """0 when the job succeeded (and, for diffstreams, the streams are equal or were
    repaired), 1 otherwise."""
    (job,) = client.call(command, params)
    return follow_job(client, job, out, as_json=as_json)


def follow_job(client: Client, job: Row, out: TextIO, *, as_json: bool) -> int:
    live = out.isatty() and not as_json
    while job["state"] not in ENDED:
        if live:
            print(f"\r{progress_line(job)}", end="", file=out, flush=True)
        time.sleep(POLL)
        (job,) = client.call("job info", {"id": job["id"]})
    if live:
        print(f"\r{progress_line(job)}", file=out)
    if as_json:
        print(json.dumps(client.request("job info", {"id": job["id"]}), indent="\t"), file=out)
    else:
        print(summary(job), file=out)
    return 0 if job["state"] == "SUCCEEDED" and not unrepaired(job) else 1


def progress_line(job: Row) -> str:
    return (f"{job['kind']} job {job['id']}: {job['state']} {job['percent']}% "
            f"({job['messagesDone']:,} of {job['messagesTotal']:,} messages, "
            f"{size(job['bytesDone'])} of {size(job['bytesTotal'])})")


def size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def unrepaired(job: Row) -> bool:
    result = job.get("result") or {}
    return bool(result.get("differing")) and not result.get("equalAfterRepair")


def summary(job: Row) -> str:
    if job["state"] == "FAILED":
        return f"{job['kind']} job {job['id']} failed: {job['error']}"
    result = job.get("result") or {}
    if job["kind"] != "diffstreams":
        return (f"copied {result.get('messages', 0):,} messages "
                f"({size(result.get('bytes', 0))}) from {job['src']} to {job['dst']}"
                + ("; the replica replicates from the source now"
                   if (job.get("options") or {}).get("autosetup") else ""))
    lines = [f"compared {result.get('compared', 0):,} messages of {job['src']} and "
             f"{job['dst']}: " + ("equal" if result.get("equal") else
                                  f"{result.get('differing')} partitions differ")]
    for part in result.get("partitions", []):
        if part["firstDifference"] is not None:
            lines.append(f"  {part['topic']}:{part['partition']} first differs at offset "
                         f"{part['firstDifference']} (source {part['source']}, destination "
                         f"{part['destination']})")
    for fixed in result.get("repaired", []):
        lines.append(f"  repaired {fixed['topic']}:{fixed['partition']}: recopied "
                     f"{fixed['messages']:,} messages from offset {fixed['from']}")
    return "\n".join(lines)


MOVE = "stream topic partition move"


def follow_move(client: Client, params: Mapping[str, str], out: TextIO) -> Row:
    """Queue the move (-wait false to the server), follow its run, with a progress line on a
    terminal; the result row the server's waiting move answers, or CommandError."""
    (run,) = client.call(MOVE, {**params, "wait": "false"})
    run = follow_run(client, run, out)
    if run["result"] is None:
        raise CommandError(errno.EBUSY, f"move #{run['id']} {run['state']}: {run['error']}; "
                           "see where the partition is with cluster store list")
    return run["result"]


RUNS = ("cluster store rebalance", "cluster store drain")


def follow_rebalance(client: Client, command: str, params: Mapping[str, str], out: TextIO
                     ) -> Row:
    """`cluster store rebalance|drain` on a terminal: start the run and follow it with a
    progress line to its end (a dry run's plan at once); the run's last row, or
    CommandError when it failed."""
    (run,) = client.call(command, params)
    if run["id"] is None:  # -dryrun true: the plan
        return run
    run = follow_run(client, run, out)
    if run["state"] != "SUCCEEDED":
        raise CommandError(errno.EBUSY, f"{run['kind']} #{run['id']} {run['state']}: "
                           f"{run['error']}; see where each partition is with cluster store "
                           "list, and run it again")
    return run


def follow_run(client: Client, run: Row, out: TextIO) -> Row:
    """A cluster's run (a rebalance, drain or move) followed to its end, with a progress line
    on a terminal; its last row."""
    live = out.isatty()
    where = {"cluster": run["cluster"], "id": run["id"]}
    while run["state"] not in ENDED:
        if live:
            print(f"\r{run_line(run)}", end="", file=out, flush=True)
        time.sleep(POLL)
        (run,) = client.call("cluster store rebalancestatus", where)
    if live:
        print(f"\r{run_line(run)}", file=out)
    return run


def run_line(run: Row) -> str:
    what = "partition move" if run["kind"] == "move" else run["kind"]
    moves = "" if run["kind"] == "move" else f"{run['movesDone']} of {run['movesTotal']} moves, "
    return (f"{what} {run['id']}: {run['state']} {run['percent']}% "
            f"({moves}{size(run['bytesDone'])} of {size(run['bytesTotal'])})")
