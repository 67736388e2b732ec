"""The schema registry's changes, as Confluent's REST API makes them (portal/registry/ serves
it): registering a schema under a subject, deleting versions and subjects (soft, then
permanently), compatibility levels and modes. Reads and permissions: registryreads.py.

Every change of a tenant's registry holds its tenant row's lock for its transaction: two
registrations under one subject would otherwise both check compatibility against the same
latest version and both take the next version number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from accounts.models import Tenant
from replication.errors import InvalidInput
from replication.models import (
    Compatibility,
    RegisteredSchema,
    RegistryConfig,
    RegistryMode,
    SubjectVersion,
)
from replication.schemas import formats
from replication.schemas.errors import (
    IncompatibleSchema,
    InvalidCompatibility,
    InvalidMode,
    ReadOnlyMode,
    SchemaNotFound,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from replication.services.registryreads import (
    Access,
    effective,
    live_parsed,
    resolve_references,
    subject_version,
    subject_versions,
)

MAX_SUBJECT = 255


@dataclass(frozen=True)
class Candidate:
    """A schema as a request gives it: {"schema", "schemaType", "references"}."""

    schema_type: str | None
    text: Any
    references: Any

    @classmethod
    def of(cls, body: Any) -> Candidate:
        body = body if isinstance(body, dict) else {}
        return cls(body.get("schemaType"), body.get("schema"), body.get("references"))

    def parse(self, tenant: Tenant) -> formats.Parsed:
        return formats.parse(self.schema_type, self.text,
                             resolve_references(tenant, self.references))


def _lock(tenant: Tenant) -> None:
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()


def _check_subject(subject: str) -> None:
    if not subject or len(subject) > MAX_SUBJECT or any(ord(c) < 32 for c in subject):
        raise InvalidInput(f"subject names are 1 to {MAX_SUBJECT} printable characters")


def schema_register(*, access: Access, subject: str, candidate: Candidate) -> SubjectVersion:
    """The subject's version holding the schema: its live one when the subject already has
    it, else a new version once compatibility allows (409 otherwise)."""
    access.require("write", "registering a schema")
    _check_subject(subject)
    tenant = access.tenant
    parsed = candidate.parse(tenant)
    with transaction.atomic():
        _lock(tenant)
        live = subject_versions(tenant, subject).select_related("schema")
        same = live.filter(schema__fingerprint=parsed.fingerprint).first()
        if same is not None:
            return same
        if effective(tenant, subject, "mode") == RegistryMode.READONLY:
            raise ReadOnlyMode(f"subject {subject!r} is in READONLY mode: set its mode (PUT "
                               "/mode/<subject>) to READWRITE to register schemas")
        _refuse_incompatible(tenant, subject, parsed)
        schema, _ = RegisteredSchema.objects.get_or_create(
            tenant=tenant, fingerprint=parsed.fingerprint,
            defaults={"schema_type": parsed.schema_type, "text": parsed.text,
                      "references": [r.as_dict() for r in parsed.references]})
        latest = subject_versions(tenant, subject, deleted=True).order_by("-version").first()
        version = SubjectVersion(tenant=tenant, subject=subject, schema=schema,
                                 version=latest.version + 1 if latest else 1)
        version.save()
        return version


def _refuse_incompatible(tenant: Tenant, subject: str, parsed: formats.Parsed) -> None:
    level = effective(tenant, subject, "compatibility")
    problems = formats.incompatibilities(level, parsed, live_parsed(tenant, subject))
    if problems:
        raise IncompatibleSchema(
            f"Schema being registered is incompatible with an earlier schema for subject "
            f"{subject!r} (compatibility {level}), details: {problems}")


def compatibility_test(*, access: Access, subject: str, version: str | None,
                       candidate: Candidate) -> list[str]:
    """Why the candidate breaks the subject's level against `version` (None: against what the
    level itself checks); empty: compatible. A subject without versions takes anything."""
    access.require("read", "testing compatibility")
    tenant = access.tenant
    parsed = candidate.parse(tenant)
    level = effective(tenant, subject, "compatibility")
    if version is None:
        return formats.incompatibilities(level, parsed, live_parsed(tenant, subject))
    try:
        old = subject_version(tenant, subject, version)
    except SubjectNotFound:
        return []
    olds = [formats.parse(old.schema.schema_type, old.schema.text,
                          resolve_references(tenant, old.schema.references))]
    return formats.incompatibilities(level.removesuffix("_TRANSITIVE"), parsed, olds)


def schema_lookup(*, access: Access, subject: str, candidate: Candidate,
                  deleted: bool = False) -> SubjectVersion:
    access.require("read", "looking a schema up")
    tenant = access.tenant
    versions = subject_versions(tenant, subject, deleted=deleted).select_related("schema")
    if not versions.exists():
        raise SubjectNotFound(f"subject {subject!r} not found")
    parsed = candidate.parse(tenant)
    found = versions.filter(schema__fingerprint=parsed.fingerprint).order_by("version").last()
    if found is None:
        raise SchemaNotFound(f"the schema is not registered under subject {subject!r}")
    return found


def subject_delete(*, access: Access, subject: str, permanent: bool) -> list[int]:
    """The versions deleted: soft (they stay readable with ?deleted=true), or permanently,
    which Confluent allows only once they are soft-deleted."""
    access.require("admin", "deleting a subject")
    tenant = access.tenant
    with transaction.atomic():
        _lock(tenant)
        every = list(subject_versions(tenant, subject, deleted=True).order_by("version"))
        if not every:
            raise SubjectNotFound(f"subject {subject!r} not found")
        if permanent:
            if any(not v.deleted for v in every):
                raise SubjectNotSoftDeleted(
                    f"subject {subject!r} was not deleted first before being permanently "
                    "deleted: delete it without permanent=true first")
            for version in every:
                version.delete()
            RegistryConfig.objects.filter(tenant=tenant, subject=subject).delete()
            return [v.version for v in every]
        live = [v for v in every if not v.deleted]
        if not live:
            raise SubjectNotFound(f"subject {subject!r} not found (its versions are "
                                  "soft-deleted: permanent=true removes them)")
        for version in live:
            version.deleted = True
            version.save()
        return [v.version for v in live]


def version_delete(*, access: Access, subject: str, version: str, permanent: bool) -> int:
    access.require("admin", "deleting a schema version")
    tenant = access.tenant
    with transaction.atomic():
        _lock(tenant)
        found = subject_version(tenant, subject, version, deleted=permanent)
        if permanent:
            if not found.deleted:
                raise VersionNotSoftDeleted(
                    f"version {found.version} of subject {subject!r} was not deleted first "
                    "before being permanently deleted: delete it without permanent=true first")
            found.delete()
            return found.version
        if found.deleted:
            raise VersionSoftDeleted(f"version {found.version} of subject {subject!r} was "
                                     "soft deleted: permanent=true removes it")
        found.deleted = True
        found.save()
        return found.version


def registry_config_set(*, access: Access, subject: str | None, field: str,
                        value: Any) -> str | None:
    """Set (or with `value` None clear) a compatibility level or mode, of a subject or with
    `subject` None the tenant's default; the value it had."""
    access.require("admin", f"changing the {field}")
    choices = Compatibility if field == "compatibility" else RegistryMode
    error = InvalidCompatibility if field == "compatibility" else InvalidMode
    if value is not None:
        value = str(value).upper()
        if value not in choices.values:
            raise error(f"{value!r} is not a {field}: use one of {', '.join(choices.values)}")
    with transaction.atomic():
        config, _ = RegistryConfig.objects.select_for_update().get_or_create(
            tenant=access.tenant, subject=subject or "")
        before = getattr(config, field) or None
        setattr(config, field, value or "")
        if not config.compatibility and not config.mode:
            config.delete()
        else:
            config.save()
    return before
