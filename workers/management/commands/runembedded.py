"""`manage.py runembedded`: the whole product in one process on the embedded default, the
ASGI server (daphne) with the beat schedule, the replicator and the configured gateways running
beside it."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workers.celery import app
from workers.embedded import start_replication, start_scheduler


class Command(BaseCommand):
    help = "Serve the portal with periodic tasks in-process (embedded mode)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("runembedded is for the embedded default (no DATABASE_URL and "
                               "no REDIS_URL); in production run the worker and beat")
        start_scheduler(app)
        start_replication()
        CommandLineInterface().run(
            ["-b", options["host"], "-p", str(options["port"]), "portal.asgi:application"]
        )
