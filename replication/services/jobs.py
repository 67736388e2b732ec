"""Bulk jobs as workflows: who may start them, the Job record, and what a finished copy means
for the replica link it serves. The jobs themselves run on Spark (workers/spark/), submitted
by Celery (workers/jobs.py) on the `job_submitted` signal."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from replication.errors import Conflict, Hint, InvalidInput, PermissionDenied
from replication.events import publish_after_commit
from replication.models import Job, ReplicaLink, ReplicaState, Stream, Topic
from replication.paths import parse_stream_path
from replication.plans import partitions_require_room
from replication.services.common import check_origins, topology_lock
from replication.services.streams import METADATA, stream_create
from replication.services.verify import agreed_link, link_repaired
from replication.services.wakeups import stream_wake
from replication.signals import job_submitted, replica_repair_started

READ_PERMS = ("consumeperm", "copyperm")
MAX_THREADS = 64


def _source(actor: AbstractBaseUser, path: str, field: str = "src") -> Stream:
    stream = Stream.objects.restrict(actor).by_path(path, field=field)
    stream.require(actor, *READ_PERMS, action="read messages for a copy or diff")
    return stream


def _require_write(actor: AbstractBaseUser, stream: Stream) -> None:
    """copyperm, or produceperm, consumeperm and topicperm together (MapR's rule)."""
    if stream.allows(actor, "copyperm") or all(
        stream.allows(actor, perm) for perm in ("produceperm", "consumeperm", "topicperm")
    ):
        return
    raise PermissionDenied(
        f"{actor.get_username()} may not copy messages into {stream.path}: it needs copyperm, "
        "or produceperm, consumeperm and topicperm; ask the stream's administrator"
    )


def _threads(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= MAX_THREADS:
        raise InvalidInput(f"-numthreads {value} is out of range: give 1 to {MAX_THREADS}",
                           field="numthreads")
    return value


@transaction.atomic
def copystream_start(
    *, actor: AbstractBaseUser, source_path: str, destination_path: str,
    numthreads: int | None = None,
) -> Job:
    """`copystream -src -dst`: creates the destination with the source's metadata when it
    does not exist (as MapR's copystream does), then copies every topic and partition."""
    source = _source(actor, source_path)
    threads = _threads(numthreads)
    path = str(parse_stream_path(destination_path, field="dst"))
    if path == source.path:
        raise InvalidInput(f"-src and -dst are both {path}: copy into another stream",
                           field="dst")
    destination = Stream.objects.restrict(actor).filter(path=path).first()
    if destination is None:
        destination = stream_create(actor=actor, path=path,
                                    **{key: getattr(source, key) for key in METADATA})
    else:
        _require_write(actor, destination)
    _give_topics(source, destination)
    return _submit(Job.Kind.COPYSTREAM, actor, source, destination, {"numthreads": threads})


def _give_topics(source: Stream, destination: Stream) -> None:
    """The destination gets each source topic it lacks, at least as many partitions. A
    topic that reaches it through replication keeps its origin; one it gets by this copy
    originates there (invariant 4 holds either way: checked like any topic creation)."""
    topology_lock()
    carried = ReplicaLink.objects.filter(source=source, replica=destination).exists()
    mine = {t.name: t for t in destination.topics.all()}
    if not carried:  # a replica's topics come by replication, which no plan refuses
        have = {name: t.partitions for name, t in mine.items()}
        partitions_require_room(destination.tenant_id, sum(
            max(0, t.partitions - have.get(t.name, 0)) for t in source.topics.all()))
    new: dict[str, Any] = {}
    for topic in source.topics.all():
        have = mine.get(topic.name)
        if have is None:
            origin = topic.origin_uuid if carried else destination.uuid
            new[topic.name] = Topic(stream=destination, name=topic.name,
                                    partitions=topic.partitions,
                                    timestamptype=topic.timestamptype, origin_uuid=origin)
        elif have.partitions < topic.partitions:
            have.partitions = topic.partitions
            have.save(update_fields=["partitions"])
    if new:
        check_origins([destination.id], extra_topics={
            destination.id: {name: t.origin_uuid for name, t in new.items()}})
        Topic.objects.bulk_create(new.values())


@transaction.atomic
def diffstreams_start(
    *, actor: AbstractBaseUser, source_path: str, destination_path: str, repair: bool = False,
) -> Job:
    source = _source(actor, source_path)
    destination = _source(actor, destination_path, field="dst")
    if source.pk == destination.pk:
        raise InvalidInput(f"-src and -dst are both {source.path}: compare two streams",
                           field="dst")
    if repair:
        _require_write(actor, destination)
    return _submit(Job.Kind.DIFFSTREAMS, actor, source, destination, {"repair": repair})


@transaction.atomic
def replica_repair(*, actor: AbstractBaseUser, source: Stream, replica: Stream) -> Job:
    """The one-click (and CLI) repair of a replica verification found diverged: the link's
    diffstreams -repair (each differing partition cut back at its first difference and
    recopied from the source), then a verification from there (job_finished). adminperm on
    the replica is enough: its messages are replaced, with the source's the link carries."""
    replica.require(actor, "adminperm", action="repair this replica")
    link = agreed_link(source, replica, doing="repair")
    running = Job.objects.active().filter(kind=Job.Kind.DIFFSTREAMS, options__link=link.pk)
    if running.exists():
        job = running.first().pk
        raise Conflict(f"a repair of {replica.path} runs already (job {job})", field="replica",
                       hint=Hint("job.info", "follow the job's progress", {"id": job},
                                 cli="follow it with {command}"))
    job = _submit(Job.Kind.DIFFSTREAMS, actor, source, replica,
                  {"repair": True, "link": link.pk})
    replica_repair_started.send(sender=ReplicaLink, link=link, actor=actor,
                                details={"job": job.pk, "source": source.path,
                                         "replica": replica.path})
    return job


def autosetup_copy(*, actor: AbstractBaseUser, link: ReplicaLink) -> Job:
    """Autosetup's step 4: the replica's copy of the source's messages. The link shows
    COPY_IN_PROGRESS (the replicator leaves it alone) until the job ends."""
    _set_state(link, ReplicaState.COPY_IN_PROGRESS)
    return _submit(Job.Kind.COPYSTREAM, actor, link.source, link.replica, {"autosetup": True},
                   link=link)


def catchup_request(*, link_id: int) -> bool:
    """The replicator's hand-off of a large backlog: True when a catch-up job of the link runs
    or was just submitted (leave the link alone meanwhile), False to replicate as usual."""
    if not settings.REPLICATION_CATCHUP_THRESHOLD:
        return False
    if Job.objects.filter(link_id=link_id, state__in=Job.ACTIVE).exists():
        return True
    with transaction.atomic():
        link = (ReplicaLink.objects.select_for_update().select_related("source", "replica")
                .filter(pk=link_id).first())
        if link is None:
            return False
        if Job.objects.filter(link_id=link_id, state__in=Job.ACTIVE).exists():
            return True  # another request won the race
        _set_state(link, ReplicaState.COPY_IN_PROGRESS)
        _submit(Job.Kind.CATCHUP, None, link.source, link.replica, {}, link=link)
    return True


def _set_state(link: ReplicaLink, state: str, percentage: int = 0) -> None:
    link.state, link.copy_percentage = state, percentage
    link.save(update_fields=["state", "copy_percentage"])


def _submit(kind: str, actor: AbstractBaseUser | None, source: Stream, destination: Stream,
            options: dict, link: ReplicaLink | None = None) -> Job:
    job = Job.objects.create(
        kind=kind, tenant_id=destination.tenant_id, source=source, destination=destination,
        source_path=source.path, destination_path=destination.path, link=link,
        requested_by=actor, options={k: v for k, v in options.items() if v is not None},
    )
    publish_job_event(job)
    transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def _enqueue(job_id: int) -> None:
    job_submitted.send(sender=Job, job_id=job_id)  # the workers app runs it


def publish_job_event(job: Job) -> None:
    tenants = {job.tenant_id, *(s.tenant_id for s in (job.source, job.destination) if s)}
    publish_after_commit(tenant_ids=tenants, event="job.progress",
                         payload={"job": job.pk, "state": job.state, "percent": job.percent})


def job_finished(*, job: Job) -> None:
    """A job ended: the link it served replicates again from the replica's end (no gap: the
    copy left the replica a prefix of the source), unpaused after an autosetup copy. A failed
    copy leaves the link paused with the reason, to resume by hand."""
    link = job.link
    if job.options.get("link") and job.state == Job.State.SUCCEEDED:
        _verify_repair(job)
    if link is None:
        return
    with transaction.atomic():
        link = ReplicaLink.objects.select_for_update().get(pk=link.pk)
        link.state = ReplicaState.REPLICATING
        link.copy_percentage = 100 if job.state == Job.State.SUCCEEDED else link.copy_percentage
        if job.state == Job.State.FAILED:
            link.last_error = (f"{job.kind} job {job.pk} failed: {job.error}; resuming the "
                               "link replicates on from where it stopped")[:2000]
            link.paused = job.kind == Job.Kind.COPYSTREAM or link.paused
        link.save(update_fields=["state", "copy_percentage", "last_error", "paused"])
        stream_wake(stream=link.source.uuid)


def _verify_repair(job: Job) -> None:
    link = (ReplicaLink.objects.select_related("source__cluster", "replica__cluster")
            .filter(pk=job.options["link"]).first())
    if link is not None:  # removed meanwhile: nothing left to verify
        link_repaired(link=link, repaired=job.result.get("repaired", []))


def jobs_stale() -> list[int]:
    """Active jobs that stopped reporting: their worker died without Celery redelivering, or
    their queued task was lost with the broker (a Redis restarted empty) before any worker
    took it."""
    now = timezone.now()
    running = now - timezone.timedelta(seconds=settings.JOB_STALE_SECONDS)
    queued = now - timezone.timedelta(seconds=settings.JOB_QUEUED_SECONDS)
    stale = Job.objects.active().filter(
        Q(updated__lt=running) | Q(state=Job.State.QUEUED, updated__lt=queued))
    return list(stale.values_list("pk", flat=True))
