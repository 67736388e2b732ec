"""`manage.py runkafka [--listen HOST:PORT] [--advertise HOST:PORT] [--cluster C]
[--defaultstream PATH] [--node-id N]`: one Kafka listener process (broker/server.py)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from broker.server import ListenerOptions, run_listener, split_address
from replication.errors import StreamgateError
from replication.paths import parse_stream_path, validate_cluster_name


class Command(BaseCommand):
    help = "Run a Kafka wire-protocol listener: stock Kafka clients produce and consume through it."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to bind")
        parser.add_argument("--advertise", default="",
                            help="HOST:PORT clients reach this listener at (default: --listen)")
        parser.add_argument("--cluster", default=None, help="serve only this cluster's streams")
        parser.add_argument("--defaultstream", default=None,
                            help="the stream plain topic names resolve to (single-tenant site)")
        parser.add_argument("--node-id", type=int, default=None,
                            help="Kafka broker id (default: a hash of the advertised address)")

    def handle(self, *args: Any, **options: Any) -> None:
        run_listener(self.options_from(options))

    @staticmethod
    def options_from(options: dict[str, Any]) -> ListenerOptions:
        try:
            for flag in ("listen", "advertise"):
                if options[flag]:
                    split_address(options[flag])
            if options["cluster"]:
                validate_cluster_name(options["cluster"], field="cluster")
            if options["defaultstream"]:
                options["defaultstream"] = str(parse_stream_path(options["defaultstream"],
                                                                 field="defaultstream"))
        except (ValueError, StreamgateError) as error:
            raise CommandError(str(error)) from error
        return ListenerOptions(listen=options["listen"], advertise=options["advertise"],
                               node_id=options["node_id"], cluster=options["cluster"],
                               default_stream=options["defaultstream"])
