"""The schema registry's reads and who may do what (replication/services/registry.py writes).

A registry request acts in one tenant: the one its URL names, else the user's first (the
tenant whose namespace the Kafka listener keeps the user's consumer groups in). Everything is
looked up within that tenant, so another tenant's subject or schema id answers 404."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F

from accounts.models import Membership, Role, Tenant, TokenScope
from replication.errors import NotFound, PermissionDenied
from replication.models import RegisteredSchema, RegistryConfig, ReplicaLink, SubjectVersion
from replication.schemas import formats
from replication.schemas.errors import (
    InvalidSchema,
    InvalidVersion,
    SchemaNotFound,
    SubjectNotFound,
    VersionNotFound,
)
from replication.scopes import scope_require

DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MAX_REFERENCE_DEPTH = 16
# What each kind of registry action needs: a tenant role and an API token scope.
NEEDS = {"read": (set(Role), TokenScope.READ),
         "write": ({Role.ADMIN, Role.MEMBER}, TokenScope.PRODUCE),
         # Deleting and settings: any writer of the tenant's, with an admin-scoped token.
         "admin": ({Role.ADMIN, Role.MEMBER}, TokenScope.ADMIN)}


@dataclass(frozen=True)
class Access:
    """A user acting in one tenant's registry, with their role there."""

    user: AbstractBaseUser
    tenant: Tenant
    role: str

    def require(self, kind: str, action: str) -> None:
        roles, scope = NEEDS[kind]
        if self.role not in roles:
            raise PermissionDenied(f"{action} needs the role {' or '.join(sorted(roles))} in "
                                   f"tenant {self.tenant.name}; yours is {self.role}")
        scope_require(self.user, scope, action=action)


def registry_access(*, actor: AbstractBaseUser, tenant_name: str | None = None) -> Access:
    memberships = Membership.objects.filter(user=actor).select_related("tenant")
    if tenant_name is not None:
        memberships = memberships.filter(tenant__name=tenant_name)
    membership = memberships.order_by("tenant_id").first()
    if membership is None:
        if tenant_name is not None:
            raise NotFound(f"no tenant {tenant_name!r} among yours")
        raise PermissionDenied(f"{actor.get_username()} belongs to no tenant, and schemas "
                               "belong to tenants: ask a tenant's administrator to invite you")
    return Access(actor, membership.tenant, membership.role)


def version_number(text: str | int) -> int | None:
    """A version as the API takes it: a positive number, or None for "latest" (and -1)."""
    if str(text) in ("latest", "-1"):
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1 or number > 2**31 - 1:
        raise InvalidVersion(f"the version {text!r} is not valid: use a number from 1, or "
                             "latest")
    return number


def subject_versions(tenant: Tenant, subject: str, *, deleted: bool = False) -> Any:
    found = SubjectVersion.objects.filter(tenant=tenant, subject=subject)
    return found if deleted else found.filter(deleted=False)


def subject_version(tenant: Tenant, subject: str, version: str | int, *,
                    deleted: bool = False) -> SubjectVersion:
    number = version_number(version)
    versions = subject_versions(tenant, subject, deleted=deleted).select_related("schema")
    if not versions.exists():
        raise SubjectNotFound(f"subject {subject!r} not found")
    found = (versions.order_by("-version").first() if number is None
             else versions.filter(version=number).first())
    if found is None:
        raise VersionNotFound(f"version {version} of subject {subject!r} not found")
    return found


def upstream_tenants(tenant: Tenant) -> set[int]:
    """The tenant, and the tenants whose streams replicate into its streams with both halves
    of the agreement (and theirs, up a chain): their messages land in this tenant's replicas
    carrying their schema ids."""
    held, frontier = {tenant.pk}, {tenant.pk}
    while frontier:
        sources = set(ReplicaLink.objects.filter(
            replica__tenant__in=frontier, replica__upstreams__source=F("source"),
        ).values_list("source__tenant_id", flat=True))
        frontier = sources - held
        held |= frontier
    return held


def schema_by_id(tenant: Tenant, schema_id: int | str, *,
                 upstream: bool = False) -> RegisteredSchema:
    """A schema of the tenant's with a version left (a soft-deleted one counts: consumers
    still read messages written with it). `upstream`: also one of the tenants replicating
    into this tenant's streams, so a consumer of a replica decodes what it reads by the ids
    the messages carry (by id only: their subjects stay theirs)."""
    owners = upstream_tenants(tenant) if upstream else {tenant.pk}
    found = RegisteredSchema.objects.filter(tenant__in=owners, versions__isnull=False)
    key: dict[str, Any] = {"pk": int(schema_id)} if str(schema_id).isdigit() else {}
    if not key:
        try:
            key = {"guid": uuid.UUID(str(schema_id))}
        except ValueError:
            raise SchemaNotFound(f"schema {schema_id} not found") from None
    schema = found.filter(**key).distinct().first()
    if schema is None:
        raise SchemaNotFound(f"schema {schema_id} not found")
    return schema


def referenced_by(tenant: Tenant, target: SubjectVersion) -> list[int]:
    """The ids of the tenant's live schemas that reference `target`. Compared in Python:
    SQLite (the embedded mode) has no JSON containment lookup."""
    schemas = RegisteredSchema.objects.filter(tenant=tenant, versions__deleted=False) \
        .exclude(references=[]).distinct().values_list("pk", "references")
    return sorted(pk for pk, references in schemas
                  if any(r.get("subject") == target.subject and r.get("version") ==
                         target.version for r in references))


def resolve_references(tenant: Tenant, given: Any, depth: int = 0) -> list[formats.Reference]:
    """Each reference with the text of the version it names, the references' own references
    first (named types must be defined before their use)."""
    if given in (None, []):
        return []
    if not isinstance(given, list) or depth > MAX_REFERENCE_DEPTH:
        raise InvalidSchema("references must be a list of {name, subject, version}, at most "
                            f"{MAX_REFERENCE_DEPTH} deep")
    resolved: list[formats.Reference] = []
    for item in given:
        if not isinstance(item, dict) or not {"name", "subject", "version"} <= set(item):
            raise InvalidSchema("each reference has a name, a subject and a version")
        try:
            target = subject_version(tenant, str(item["subject"]), item["version"])
        except NotFound as error:
            raise InvalidSchema(f"reference {item['name']!r}: {error.desc}") from None
        nested = resolve_references(tenant, target.schema.references, depth + 1)
        resolved += [r for r in nested if r not in resolved]
        resolved.append(formats.Reference(str(item["name"]), target.subject, target.version,
                                          target.schema.text))
    return resolved


def parsed_of(schema: RegisteredSchema) -> formats.Parsed:
    return formats.parse(schema.schema_type, schema.text,
                         resolve_references(schema.tenant, schema.references))


def live_parsed(tenant: Tenant, subject: str) -> Sequence[formats.Parsed]:
    versions = subject_versions(tenant, subject).select_related("schema__tenant")
    return [parsed_of(v.schema) for v in versions.order_by("version")]


def config_of(tenant: Tenant, subject: str | None, field: str) -> str | None:
    """A subject's own setting (None: not set), or with `subject` None the tenant's."""
    return RegistryConfig.objects.filter(tenant=tenant, subject=subject or "").values_list(
        field, flat=True).first() or None


def effective(tenant: Tenant, subject: str, field: str) -> str:
    default = DEFAULT_COMPATIBILITY if field == "compatibility" else DEFAULT_MODE
    return config_of(tenant, subject, field) or config_of(tenant, None, field) or default


@dataclass(frozen=True)
class SubjectSummary:
    """One subject of a tenant's, as the Schemas page lists it."""

    subject: str
    versions: list[int]
    latest_id: int
    schema_type: str
    compatibility: str
    deleted: list[int] = field(default_factory=list)  # soft-deleted versions, when asked for


def subject_summaries(tenant: Tenant, *, deleted: bool = False) -> list[SubjectSummary]:
    """The tenant's live subjects, by name (with `deleted`, also their soft-deleted versions
    and the subjects whose versions are all soft-deleted): two queries whatever their
    number. The latest id and type are the latest live version's, else the latest's."""
    rows: dict[str, list[tuple[int, int, str, bool]]] = {}
    versions = SubjectVersion.objects.filter(tenant=tenant).order_by("subject", "version")
    for subject, version, schema_id, kind, gone in (
            versions if deleted else versions.filter(deleted=False)).values_list(
            "subject", "version", "schema_id", "schema__schema_type", "deleted"):
        rows.setdefault(subject, []).append((version, schema_id, kind, gone))
    own = dict(RegistryConfig.objects.filter(tenant=tenant).exclude(compatibility="")
               .values_list("subject", "compatibility"))
    default = own.get("", DEFAULT_COMPATIBILITY)
    summaries = []
    for subject, found in sorted(rows.items()):
        live = [row for row in found if not row[3]]
        _, latest_id, kind, _ = (live or found)[-1]
        summaries.append(SubjectSummary(subject, [v for v, *_ in live], latest_id, kind,
                                        own.get(subject, default),
                                        [v for v, *_, gone in found if gone]))
    return summaries
