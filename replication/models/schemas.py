"""The schema registry's rows (Confluent's REST API, per tenant: replication/services/registry.py).

A schema's id is the primary key of its `RegisteredSchema`, so ids are integers unique across
the whole site as Confluent's are registry-wide; each row belongs to one tenant, and the same
text registered by two tenants makes two rows with two ids, so an id never leads from one
tenant's subjects to another's. Within a tenant a schema text has one id, whatever subjects it
is registered under."""

from __future__ import annotations

import uuid

from django.db import models

from accounts.models import Tenant
from accounts.scoping import RestrictedQuerySet


class SchemaType(models.TextChoices):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class Compatibility(models.TextChoices):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


class RegistryMode(models.TextChoices):
    READWRITE = "READWRITE"
    READONLY = "READONLY"


class TenantOwnedQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)


class RegisteredSchema(models.Model):
    """One schema text of a tenant, canonical (Avro's JSON form, JSON Schema compacted, a
    .proto file as given); `fingerprint` hashes its type, text and references."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="schemas")
    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    schema_type = models.CharField(max_length=8, choices=SchemaType.choices)
    text = models.TextField()
    # Confluent's form: [{"name": ..., "subject": ..., "version": ...}], in the given order.
    references = models.JSONField(default=list, blank=True)
    fingerprint = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)

    objects = TenantOwnedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "fingerprint"],
                                               name="schema_unique_per_tenant")]

    def __str__(self) -> str:
        return f"schema {self.pk} ({self.schema_type})"


class SubjectVersion(models.Model):
    """A version of a subject: which schema it is. A soft delete sets `deleted` (the version
    still answers `?deleted=true` and its schema's id still resolves, for consumers reading old
    messages); a permanent delete removes the row."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="subject_versions")
    subject = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    schema = models.ForeignKey(RegisteredSchema, on_delete=models.PROTECT,
                               related_name="versions")
    deleted = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    objects = TenantOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["subject", "version"]
        constraints = [models.UniqueConstraint(fields=["tenant", "subject", "version"],
                                               name="subject_version_unique")]

    def __str__(self) -> str:
        return f"{self.subject} version {self.version} (schema id {self.schema_id})"


class RegistryConfig(models.Model):
    """A tenant's compatibility level and mode: for one subject, or (`subject` empty) the
    tenant's default. Empty inherits (a subject the tenant's, the tenant BACKWARD/READWRITE)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="registry_configs")
    subject = models.CharField(max_length=255, blank=True)
    compatibility = models.CharField(max_length=24, choices=Compatibility.choices, blank=True)
    mode = models.CharField(max_length=16, choices=RegistryMode.choices, blank=True)

    objects = TenantOwnedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "subject"],
                                               name="registry_config_unique")]

    def __str__(self) -> str:
        return f"registry config {self.subject or '(default)'}"
