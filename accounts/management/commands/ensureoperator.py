"""`manage.py ensureoperator`: the first operator account, so a fresh install can be logged
into. Safe to run on every start (`make run`, compose's web service): after the first run it
only says the account exists, and never shows a password again.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.models import Membership, Role, Tenant

DEFAULT_TENANT = "default"


class Command(BaseCommand):
    help = ("Create the operator account ($STREAMGATE_ADMIN_USER, default admin) and the "
            "'default' tenant on first run; later runs change nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("STREAMGATE_ADMIN_USER") or "admin"
        given = os.environ.get("STREAMGATE_ADMIN_PASSWORD") or None
        password = given or secrets.token_urlsafe(16)
        with transaction.atomic():
            User = get_user_model()
            user, created = User.objects.get_or_create(
                username=username, defaults={"is_staff": True, "is_superuser": True}
            )
            if not created:
                self.existing(user)
                return
            self.set_password(user, password)
            tenant, _ = Tenant.objects.get_or_create(name=DEFAULT_TENANT)
            Membership.objects.get_or_create(user=user, tenant=tenant,
                                             defaults={"role": Role.ADMIN})
        self.report(username, None if given else password)

    def existing(self, user: Any) -> None:
        if not user.is_staff:
            raise CommandError(
                f"user {user.get_username()} exists but is not an operator: make it staff in "
                "the admin, or set STREAMGATE_ADMIN_USER to another name"
            )
        self.stdout.write(f"operator account exists: {user.get_username()}")

    def set_password(self, user: Any, password: str) -> None:
        try:
            password_validation.validate_password(password, user)
        except ValidationError as error:
            raise CommandError("STREAMGATE_ADMIN_PASSWORD: " + " ".join(error.messages)) from error
        user.set_password(password)
        user.save(update_fields=["password"])

    def report(self, username: str, generated: str | None) -> None:
        port = os.environ.get("PORT") or "8000"
        self.stdout.write(f"created operator account {username} "
                          f"(admin of tenant {DEFAULT_TENANT})")
        if generated:
            self.stdout.write(f"password: {generated}  (shown only now: note it)")
        else:
            self.stdout.write("password: the one in STREAMGATE_ADMIN_PASSWORD")
        self.stdout.write(f"log in: http://127.0.0.1:{port}/admin/ (operators) and "
                          f"http://127.0.0.1:{port}/ (portal)")
