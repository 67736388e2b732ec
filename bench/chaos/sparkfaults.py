"""The chaos soak's Spark faults and looks (bench/chaos/faults.py's driver uses them): a
replica link handed to the Spark catch-up job, whether one runs, and which links it holds."""

from __future__ import annotations

import importlib.util
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.chaos.faults import Driver


def spark_built() -> bool:
    return importlib.util.find_spec("workers.spark") is not None


def spark_catchup(driver: Driver) -> None:
    """Hand a replica link to the Spark catch-up job, as the replicator does with a large
    backlog (replication.services.jobs.catchup_request): the Celery worker runs the job
    while the replicator leaves the link alone, then the link replicates on from the replica's
    end."""
    from replication.models import Job, ReplicaLink
    from replication.services.jobs import catchup_request

    if "Redis" in driver.down:
        return  # the job is sent through the broker
    source, replica = driver.rng.choice(driver.topology.moving_links())
    streams = driver.topology.streams
    link = ReplicaLink.objects.get(source=streams[source], replica=streams[replica])
    before = Job.objects.count()
    # True also when a job of the link still runs: count only the jobs submitted here.
    if catchup_request(link_id=link.pk) and Job.objects.count() > before:
        driver.faults["Spark catch-up"] += 1
        driver.next_spark = time.monotonic() + driver.options.spark_every
        driver.say(f"Spark catch-up of {source} -> {replica}")


def spark_app_running(cluster: Any) -> bool:
    """An application (a catch-up job) has executors running on the standalone cluster's
    worker."""
    try:
        return bool(cluster.worker is not None and cluster.worker_state().get("executors"))
    except (OSError, ValueError):  # the worker's page not answering this time
        return False


def catching_up() -> frozenset[str]:
    """The replica streams whose link a running Spark catch-up holds."""
    from replication.models import Job

    return frozenset(Job.objects.filter(state__in=Job.ACTIVE, kind=Job.Kind.CATCHUP)
                     .values_list("destination_path", flat=True))


def jobs_active() -> bool:
    from replication.models import Job

    return Job.objects.filter(state__in=Job.ACTIVE).exists()
