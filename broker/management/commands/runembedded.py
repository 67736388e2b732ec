"""`manage.py runembedded`: the whole product in one process on the embedded default, the
ASGI server (daphne) with the beat schedule, the replicator and the configured gateways running
beside it (and, with --demo, a producer of page clicks into the demo stream).

It lives with the Kafka listener because it composes everything and only the top layer may:
the workers' parts come through their entrances (workers/embedded.py), the listener is a
thread of this package, and the portal is named only as daphne's ASGI application path, as
any ASGI server names it, so the portal and the listener still import nothing of each other.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from broker.server import ListenerOptions, start_listener_thread
from replication.demo import start_trickle
from workers.celery import app
from workers.embedded import start_replication, start_scheduler


class Command(BaseCommand):
    help = "Serve the portal with periodic tasks in-process (embedded mode)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--kafka", default="", metavar="HOST:PORT",
                            help="also serve Kafka clients here (a listener thread)")
        parser.add_argument("--demo", action="store_true",
                            help="keep producing page clicks into the demo stream")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("runembedded is for the embedded default (no DATABASE_URL and "
                               "no REDIS_URL); in production run the worker and beat")
        start_scheduler(app)
        start_replication()
        if options["kafka"]:
            start_listener_thread(ListenerOptions(listen=options["kafka"]))
        if options["demo"]:
            username = os.environ.get("STREAMGATE_ADMIN_USER") or "admin"
            actor = get_user_model().objects.filter(username=username).first()
            if actor is not None:
                start_trickle(actor=actor)
        CommandLineInterface().run(
            ["-b", options["host"], "-p", str(options["port"]), "portal.asgi:application"]
        )
