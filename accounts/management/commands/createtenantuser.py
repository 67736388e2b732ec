"""`manage.py createtenantuser`: an account in a tenant, ready for the API and CLI.

Idempotent: on an existing user it adds what is asked (tenant, membership, groups, operator
flag) and issues a new token. The token is the LAST line of output so scripts can take it
with `| tail -n 1`.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.models import Membership, Role, Tenant, validate_tenant_name
from accounts.names import NAME_CHARS, NAME_HINT
from accounts.tokens import issue_token


def ace_name(kind: str, name: str) -> str:
    """Users and groups are named in ACEs (`u:<name>`, `g:<name>`), so a name the ACE
    language cannot spell would make an account no ACE can grant anything to."""
    if not name or not set(name) <= NAME_CHARS:
        raise CommandError(f"invalid {kind} name {name!r}: {NAME_HINT}")
    return name


def validated(check: Any, *args: Any) -> None:
    try:
        check(*args)
    except ValidationError as error:
        raise CommandError(" ".join(error.messages)) from error


class Command(BaseCommand):
    help = "Create (or extend) a user in a tenant and print a new API token as the last line."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant name (created if needed)")
        parser.add_argument("--username", required=True)
        parser.add_argument("--group", action="append", default=[], dest="groups",
                            help="a group named in ACEs as g:<group>; repeat for several")
        parser.add_argument("--operator", action="store_true",
                            help="make the user a cluster operator (staff, admin site)")
        parser.add_argument("--role", choices=Role.values, default=None,
                            help="role in the tenant (default member; changes an existing one)")
        parser.add_argument("--password",
                            help="default: $STREAMGATE_PASSWORD, else no password (token only)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant_name, username = options["tenant"], options["username"]
        validated(validate_tenant_name, tenant_name)
        ace_name("user", username)
        groups = [ace_name("group", group) for group in options["groups"]]
        password = options["password"] or os.environ.get("STREAMGATE_PASSWORD") or None
        with transaction.atomic():
            user = self.ensure_user(username, password, operator=options["operator"])
            self.ensure_membership(user, tenant_name, options["role"])
            self.ensure_groups(user, groups)
            _, token = issue_token(user, name="createtenantuser")
        self.stdout.write(token)

    def ensure_user(self, username: str, password: str | None, *, operator: bool) -> Any:
        User = get_user_model()
        validated(User.username_validator, username)
        user, created = User.objects.get_or_create(username=username)
        self.say(f"{'created' if created else 'existing'} user {username}")
        if password is not None:
            validated(password_validation.validate_password, password, user)
            user.set_password(password)
        elif created:
            # Token-only account until someone sets a password in the admin.
            user.set_unusable_password()
        if operator and not user.is_staff:
            user.is_staff = True
            self.say(f"{username} is now a cluster operator")
        user.save()
        return user

    def ensure_membership(self, user: AbstractBaseUser, tenant_name: str, role: str | None) -> None:
        tenant, created = Tenant.objects.get_or_create(name=tenant_name)
        if created:
            self.say(f"created tenant {tenant_name}")
        membership, created = Membership.objects.get_or_create(
            user=user, tenant=tenant, defaults={"role": role or Role.MEMBER}
        )
        # Re-running without --role must not demote an existing tenant administrator.
        if not created and role and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
        self.say(f"{user.get_username()} is {membership.role} of tenant {tenant_name}")

    def ensure_groups(self, user: Any, groups: list[str]) -> None:
        for name in groups:
            group, created = Group.objects.get_or_create(name=name)
            if created:
                self.say(f"created group {name}")
            user.groups.add(group)
        if groups:
            self.say(f"{user.get_username()} is in groups {', '.join(sorted(groups))}")

    def say(self, line: str) -> None:
        self.stdout.write(line)
