"""`manage.py rungateway --cluster C --name G`: one gateway process (workers/replication/
gateway.py)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from workers.replication.gateway import GatewayRefused, run_gateway


class Command(BaseCommand):
    help = "Run a gateway: apply replicated batches to the replicas of its cluster."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--cluster", required=True, help="the destination cluster")
        parser.add_argument("--name", required=True, help="the gateway's configured name")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_gateway(options["cluster"], options["name"], loglevel=options["loglevel"])
        except GatewayRefused as error:
            raise CommandError(str(error)) from error
