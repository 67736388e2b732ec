"""`manage.py demoscene`: the demo scene on a fresh database (see replication/demo.py)."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from replication.demo import KAFKA_STREAM, REPLICA, SOURCE, demo_scene_create


class Command(BaseCommand):
    help = "Create the demo clusters, gateways and replicated stream on a fresh database."

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("STREAMGATE_ADMIN_USER") or "admin"
        actor = get_user_model().objects.filter(username=username, is_staff=True).first()
        if actor is None:
            raise CommandError(f"no operator {username}: run 'manage.py ensureoperator' first")
        if demo_scene_create(actor=actor):
            self.stdout.write(f"demo: clusters sanfrancisco and newyork, gateways gw1 gw2, "
                              f"{SOURCE} replicated to {REPLICA}, a trickle producer, plain Kafka "
                              f"names in {KAFKA_STREAM}")
        else:
            self.stdout.write("demo: the database already has clusters; nothing added")
