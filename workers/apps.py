from typing import Any

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Workers"

    def ready(self) -> None:
        from replication.services.compare import register_copier, register_differ
        from replication.signals import job_submitted, rebalance_submitted
        from replication.transport.batchqueue import local_delivery
        from workers.compare import link_copy, streams_differ
        from workers.tasks import send_eagerly

        job_submitted.connect(_run_job, dispatch_uid="job_enqueue")
        rebalance_submitted.connect(_run_rebalance, dispatch_uid="rebalance_enqueue")
        register_differ(streams_differ)
        register_copier(link_copy)
        local_delivery(send_eagerly)


def _run_job(sender: Any, *, job_id: int, **_: Any) -> None:
    from workers.tasks import job_enqueue

    job_enqueue(job_id)


def _run_rebalance(sender: Any, *, rebalance_id: int, **_: Any) -> None:
    from workers.tasks import rebalance_enqueue

    rebalance_enqueue(rebalance_id)
