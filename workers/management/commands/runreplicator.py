"""`manage.py runreplicator`: the source side of replication (workers/replication/loop.py)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from replication.transport import transport
from workers.replication.loop import Replicator


class Command(BaseCommand):
    help = "Run the replicator: cut batches and hand them to live gateways."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.REDIS_URL:
            raise CommandError("the replicator is a separate process only in production "
                               "(REDIS_URL set); in embedded mode 'make run' runs it in-process")
        # The replicator keeps no state worth saving (the replicas' partitions are the record of
        # progress), so a stop exits at once, even from inside a blocked BLPOP.
        signal.signal(signal.SIGTERM, _exit)
        self.stdout.write("replicator running")
        Replicator(transport()).run(threading.Event())


def _exit(*_: object) -> None:
    raise SystemExit(0)
