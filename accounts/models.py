from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any

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
    # A tenant signed up with STREAMGATE_SIGNUP=approval waits for an operator: its members
    # sign in, but no stream is created in it until this is set (the admin's Approve action).
    approved = models.BooleanField(
        default=True, help_text="unset: signed up, waiting for an operator's approval; "
                                "no stream can be created in it")
    # PROTECT: deleting a plan that tenants still have would silently lift their limits.
    plan = models.ForeignKey(Plan, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="tenants",
                             help_text="limits and default quotas; empty: no limits")

    objects = TenantQuerySet.as_manager()

    def administered_by(self, user: Any) -> bool:
        """Whether `user` may manage the tenant's members: its administrators, and operators."""
        if not (user.is_authenticated and user.is_active):
            return False
        return bool(user.is_staff) or self.memberships.filter(user=user,
                                                               role=Role.ADMIN).exists()


class Role(models.TextChoices):
    # Roles are what ACE terms `r:<role>` match, within the stream's tenant.
    ADMIN = "admin", "Tenant administrator"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer (read only)"


class MembershipQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")
        ]
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class InvitationQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)


class Invitation(models.Model):
    """A one-time link into a tenant with a role. Only the token's SHA-256 is kept: the token
    is 256 random bits, so a plain hash is as good as a slow one and the link is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    email = models.EmailField(blank=True, help_text="whom it is for (a note; optional)")
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()
    used = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="+")
    revoked = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self) -> str:
        whom = f" for {self.email}" if self.email else ""
        return f"invitation to {self.tenant} as {self.role}{whom}"

    @staticmethod
    def hash_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def state(self, now: datetime) -> str:
        """open, used, revoked or expired: what the link does when opened at `now`."""
        if self.used:
            return "used"
        if self.revoked:
            return "revoked"
        return "expired" if self.expires <= now else "open"


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


class TokenScope(models.TextChoices):
    """What an API token may do, on every interface it reaches (replication/scopes.py), within
    what its user may do: a narrower scope only ever takes permissions away."""

    READ = "read", "Read only (consume, describe)"
    PRODUCE = "produce", "Produce (read, produce, commit offsets)"
    ADMIN = "admin", "Admin (everything the user may do)"


# The stream permissions each scope keeps; the rest of the user's are masked out.
SCOPE_PERMS: dict[str, frozenset[str]] = {
    TokenScope.READ: frozenset({"consumeperm"}),
    TokenScope.PRODUCE: frozenset({"consumeperm", "produceperm"}),
    TokenScope.ADMIN: frozenset({"produceperm", "consumeperm", "topicperm", "copyperm",
                                 "adminperm"}),
}
SCOPE_ORDER = (TokenScope.READ, TokenScope.PRODUCE, TokenScope.ADMIN)


class TokenInfo(models.Model):
    """What knox's AuthToken lacks: a name, a scope and when it was last used. A token without
    one (made before scopes, or by knox's login view directly) has the admin scope."""

    token = models.OneToOneField("knox.AuthToken", on_delete=models.CASCADE, primary_key=True,
                                 related_name="info")
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=16, choices=TokenScope.choices, default=TokenScope.ADMIN)
    # Written at most once a minute per token (accounts/tokens.py `note_use`).
    last_used = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name or 'token'} ({self.scope})"


class SignInSession(models.Model):
    """A browser sign-in, kept at login (accounts/sessions.py) so the account page lists and
    ends them without scanning the session table."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="sign_ins")
    session_key = models.CharField(max_length=40, unique=True)
    user_agent = models.CharField(max_length=300, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # Written at most once a minute per session (accounts/sessions.py).
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return f"{self.user} from {self.ip or 'unknown'}"


class TotpDevice(models.Model):
    """A user's TOTP second factor (RFC 6238, accounts/totp.py). Unconfirmed until a code from
    the authenticator app proves it was set up; only a confirmed one is asked for at sign-in.
    `last_step` is the last time step accepted: a code of that step or before is a replay."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="totp")
    secret = models.CharField(max_length=64)  # base32, as authenticator apps take it
    confirmed = models.BooleanField(default=False)
    last_step = models.BigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"TOTP of {self.user}"


class RecoveryCode(models.Model):
    """A one-use code that stands in for a TOTP code; kept hashed as a password is."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="recovery_codes")
    code_hash = models.CharField(max_length=128)

    def __str__(self) -> str:
        return f"recovery code of {self.user}"
