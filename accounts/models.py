from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from accounts.modelbases import titled
from accounts.scoping import RestrictedQuerySet

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def validate_tenant_name(value: str) -> None:
    if not TENANT_NAME.fullmatch(value):
        raise ValidationError(
            f"invalid tenant name {value!r}: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


class TenantQuerySet(RestrictedQuerySet):
    tenant_paths = ("",)


def _limit(help_text: str, *, big: bool = True) -> models.Field:
    field = models.PositiveBigIntegerField if big else models.PositiveIntegerField
    return field(null=True, blank=True, help_text=f"{help_text}; empty: no limit")


class Plan(models.Model):
    """What an operator sells a tenant: how many streams, partitions and stored bytes it may
    have, and its default quotas (replication/plans.py enforces the limits, replication/
    quotas.py the rates). Empty means no limit. A tenant's own quota fields, where set,
    override its plan's (an operator's exception for one tenant)."""

    name = models.CharField(max_length=63, unique=True)
    max_streams = _limit("streams the tenant may have (replicas included)", big=False)
    max_partitions = _limit("partitions over all the tenant's topics", big=False)
    max_stored_bytes = _limit("bytes stored in the tenant's streams (keys, values, headers)")
    produce_bytes_rate = _limit("bytes a second produced")
    fetch_bytes_rate = _limit("bytes a second fetched")
    request_rate = _limit("requests a second", big=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Tenant(titled("name")):
    name = models.CharField(max_length=63, unique=True, validators=[validate_tenant_name])
    created = models.DateTimeField(auto_now_add=True)
    # Quotas an operator sets (replication/quotas.py): bytes a second produced into and
    # fetched from the tenant's streams, and requests a second its members send, on each
    # listener and portal process (as Kafka's quotas hold per broker); None: no limit.
    produce_bytes_rate = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="bytes a second produced; empty: no limit")
    fetch_bytes_rate = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="bytes a second fetched; empty: no limit")
    request_rate = models.PositiveIntegerField(
        null=True, blank=True, help_text="requests a second; empty: no limit")
    # PROTECT: deleting a plan that tenants still have would silently lift their limits.
    plan = models.ForeignKey(Plan, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="tenants",
                             help_text="limits and default quotas; empty: no limits")

    objects = TenantQuerySet.as_manager()


class Role(models.TextChoices):
    # Roles are what ACE terms `r:<role>` match, within the stream's tenant.
    ADMIN = "admin", "Tenant administrator"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer (read only)"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")
        ]
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ScramMechanism(models.TextChoices):
    # The values are the SASL mechanism names; Kafka's wire number is `kafka_type`.
    SHA_256 = "SCRAM-SHA-256", "SCRAM-SHA-256"
    SHA_512 = "SCRAM-SHA-512", "SCRAM-SHA-512"

    @property
    def kafka_type(self) -> int:
        """The mechanism's number in Describe/AlterUserScramCredentials (Kafka's ScramMechanism
        enum: 1 for SHA-256, 2 for SHA-512)."""
        return 1 if self is ScramMechanism.SHA_256 else 2


class ScramCredential(models.Model):
    """A user's SCRAM credential for one mechanism (RFC 5802, RFC 7677): what the server needs to
    check a client's proof and prove itself, never the password, from which it cannot be
    turned back into one."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scram_credentials"
    )
    mechanism = models.CharField(max_length=16, choices=ScramMechanism.choices)
    salt = models.BinaryField()
    iterations = models.PositiveIntegerField()
    stored_key = models.BinaryField()
    server_key = models.BinaryField()
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "mechanism"],
                                    name="one_scram_credential_per_mechanism")
        ]
        ordering = ["user__username", "mechanism"]

    def __str__(self) -> str:
        return f"{self.mechanism} for {self.user}"
