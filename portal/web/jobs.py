"""Jobs page: the tenant's Spark copy and diff runs (replication.models.Job) with live progress,
and a form that starts copystream or diffstreams through the same services as the CLI.

Jobs are reached through `Job.objects.restrict(user)` (another tenant's: 404); the services
(replication/services/jobs.py) check the stream permissions themselves, and a refusal shows
their `desc`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.web.forms import field_errors
from portal.web.tenancy import (
    current_tenant,
    page_and_fragment,
    render_page,
    tenant_stream_paths,
)
from replication.errors import StreamgateError
from replication.models import Job
from replication.services.jobs import copystream_start, diffstreams_start

RESULT_COLUMNS = ("topic", "partition", "firstDifference", "compared", "source", "destination")


def visible_jobs(request: HttpRequest) -> QuerySet[Job]:
    return Job.objects.restrict(request.user).select_related("requested_by")


def visible_job(request: HttpRequest, pk: int) -> Job:
    return get_object_or_404(visible_jobs(request), pk=pk)


def _tenant_jobs(request: HttpRequest) -> QuerySet[Job]:
    jobs = visible_jobs(request)
    tenant = current_tenant(request)
    return jobs.filter(tenant=tenant) if tenant is not None else jobs


def _table_context(request: HttpRequest) -> dict[str, Any]:
    return {"jobs": _tenant_jobs(request)[:200]}


def _page_context(request: HttpRequest) -> dict[str, Any]:
    """The table, and the tenant's streams the path fields offer as they are typed."""
    return {**_table_context(request), "path_options": tenant_stream_paths(request)}


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    return render_page(request, "web/jobs.html", {**_page_context(request),
                                                  "form": request.GET})


@login_required
def job_table(request: HttpRequest) -> HttpResponse:
    """The jobs table alone, re-fetched by static/js/live.js when a job changes state."""
    return render(request, "web/_jobs_table.html", _table_context(request))


def _start(request: HttpRequest, kind: str) -> Job:
    source, destination = (request.POST.get(k, "").strip() for k in ("source", "destination"))
    if kind == Job.Kind.COPYSTREAM:
        threads = request.POST.get("numthreads", "").strip()
        return copystream_start(actor=request.user, source_path=source,
                                destination_path=destination,
                                numthreads=int(threads) if threads.isdigit() else None)
    return diffstreams_start(actor=request.user, source_path=source,
                             destination_path=destination,
                             repair=request.POST.get("repair") == "on")


JOB_FIELDS = ("kind", "source", "destination", "numthreads", "repair")
JOB_ALIASES = {"src": "source", "dst": "destination"}  # the services' (CLI) field names


@login_required
@require_POST
def job_start(request: HttpRequest) -> HttpResponse:
    """Start a job; refused, the jobs page again with the error beside its field and what
    was typed."""
    kind = request.POST.get("kind", "")
    errors: dict[str, str] = {}
    if kind not in (Job.Kind.COPYSTREAM, Job.Kind.DIFFSTREAMS):
        errors = {"kind": "Choose copystream or diffstreams."}
    else:
        try:
            job = _start(request, kind)
        except StreamgateError as err:
            errors = field_errors(err, JOB_FIELDS, JOB_ALIASES)
        else:
            messages.success(request, f"{kind} started")
            return redirect("job-detail", job.pk)
    typed = {name: request.POST.get(name, "") for name in JOB_FIELDS}
    return render_page(request, "web/jobs.html", {**_page_context(request), "form": typed,
                                                  "errors": errors}, status=400)


def _result_tables(result: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str],
                                                    list[list[Any]]]:
    """diffstreams' result: its scalar fields, and its per-partition rows (the first differing
    offset of each) as a table whatever columns the job reports."""
    listed = result.get("partitions")  # copystream reports a count here, diffstreams rows
    rows = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
    # jsonb keeps no key order: the identifying columns and the answer first.
    columns = [c for c in RESULT_COLUMNS if any(c in row for row in rows)]
    for row in rows:
        columns += [key for key in row if key not in columns]
    scalars = [(k, v) for k, v in result.items() if not isinstance(v, list | dict)]
    return scalars, columns, [[row.get(c, "") for c in columns] for row in rows]


def _detail_context(request: HttpRequest, pk: int) -> dict[str, Any]:
    job = visible_job(request, pk)
    scalars, columns, rows = _result_tables(job.result or {})
    return {"job": job, "result_fields": scalars, "result_columns": columns,
            "result_rows": rows}


# The job's page, and its card alone (re-fetched when the job changes state).
job_detail, job_status = page_and_fragment("web/job_detail.html", "web/_job_card.html",
                                           _detail_context)
