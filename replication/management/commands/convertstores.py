"""`manage.py convertstores`: each cluster's message store (PostgreSQL or SQLite) converted in
place to the batch layout (issue 30; pgbatch/convert.py, sqliteconvert.py), with its progress.
Run it with the cluster's writers (gateways, listeners, portal) stopped; running it again
finishes an interrupted conversion and leaves a converted store as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from replication.engine.factory import sqlite_path
from replication.engine.pgbatch.convert import Converted, convert_to_batches
from replication.engine.sqliteconvert import convert_sqlite_to_batches
from replication.models import Cluster
from replication.stores import store_url


class Command(BaseCommand):
    help = "Convert the clusters' message stores to the batch layout (record batches as sent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="only this cluster (default: every cluster)")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name=options["cluster"])
            if not clusters:
                raise CommandError(f"no cluster {options['cluster']}: see `cluster list`")
        for cluster in clusters:
            done = _convert(store_url(cluster), self._progress(cluster.name))
            if done.already:
                self.stdout.write(f"{cluster.name}: already a batch store, nothing to do")
            else:
                self.stdout.write(f"{cluster.name}: converted {done.messages} messages of "
                                  f"{done.partitions} partitions into {done.batches} batches")

    def _progress(self, name: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            self.stdout.write(f"{name}: {done}/{total} partitions ({100 * done // total}%)")
        return report


def _convert(url: str, progress: Callable[[int, int], None]) -> Converted:
    if url.startswith("sqlite:///"):  # the embedded default's file
        return convert_sqlite_to_batches(sqlite_path(url), progress=progress)
    return convert_to_batches(url, progress=progress)
