"""copystream, diffstreams, and job list|info: the bulk jobs that run on Spark.

copystream and diffstreams start a job and answer with its row at once; the command line
follows the job to its end (streamgate/jobs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest import rows
from portal.rest.commands.registry import Handler, Row, command
from portal.rest.options import Bool, Choice, Int, Refused, StreamPath
from replication.errors import NotFound
from replication.models import Job
from replication.services.jobs import copystream_start, diffstreams_start

SRC = StreamPath("src", "the source stream", required=True)
DST = StreamPath("dst", "the destination stream", required=True)


def _job_start(start: Callable[..., Job], option: str) -> Handler:
    """A command starting a bulk job from -src to -dst, with one option of its own; it
    answers with the job's row at once."""

    def handler(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
        job = start(actor=user, source_path=opts["src"], destination_path=opts["dst"],
                    **{option: opts[option]})
        return [rows.job_row(job)]

    return handler


copystream = command(
    "copystream", SRC, DST,
    Refused("mapreduce", accepts_false=True,
            reason="MapReduce is not available: streamgate's bulk copies run as Spark jobs"),
    Int("numthreads", "Spark tasks running at once (default: one per partition)"),
    summary="Copy every topic and partition of a stream into another (created with the "
            "source's metadata when missing), as a Spark job.",
    changes=True,
)(_job_start(copystream_start, "numthreads"))

diffstreams = command(
    "diffstreams", SRC, DST,
    Bool("repair", "recopy each partition from its first difference (default false)",
         default=False),
    summary="Compare two streams partition by partition (counts, offsets, checksums per "
            "offset range) and report the first differing offset, as a Spark job.",
    changes=True,
)(_job_start(diffstreams_start, "repair"))


@command(
    "job/list",
    Choice("kind", "only jobs of this kind", choices=tuple(Job.Kind.values)),
    Choice("state", "only jobs in this state", choices=tuple(Job.State.values)),
    Int("limit", "at most this many, newest first (default 50)", default=50),
    summary="List the bulk jobs of your tenants, newest first.",
    changes=False,
)
def job_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    jobs = Job.objects.restrict(user).select_related("requested_by")
    for field in ("kind", "state"):
        if opts[field]:
            jobs = jobs.filter(**{field: opts[field]})
    return [rows.job_row(job) for job in jobs[: max(0, opts["limit"])]]


@command("job/info", Int("id", "the job's id", required=True),
         summary="A bulk job's state, progress and result.", changes=False)
def job_info(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    job = Job.objects.restrict(user).select_related("requested_by").filter(pk=opts["id"]).first()
    if job is None:
        raise NotFound(f"job {opts['id']} does not exist: list jobs with 'streamgate job list'",
                       field="id")
    return [rows.job_row(job, detail=True)]
