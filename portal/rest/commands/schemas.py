"""schema list|info|register|check|delete|compatibility: the tenant's schema registry (the
Confluent-compatible one at /schemas/registry/) from the command line and /rest.

    streamgate schema list
    streamgate schema info -subject orders-value [-version 2]
    streamgate schema register -subject orders-value -type avro -schema orders.avsc
    streamgate schema check -subject orders-value -type avro -schema orders.avsc
    streamgate schema delete -subject orders-value [-version 2] [-permanent true]
    streamgate schema compatibility -subject orders-value [-level full]

The same services and the same rules as the registry's REST API (replication/services/
registry.py): reading needs any role, registering a member with a produce-scope token, deleting
and settings an admin-scope token. The CLI reads -schema from a file when it names one.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command
from portal.rest.options import Bool, Choice, Str
from replication.errors import InvalidInput
from replication.models import Compatibility, SubjectVersion
from replication.services import registry, registryreads
from replication.services.registryreads import Access

SUBJECT = Str("subject", "the subject, e.g. orders-value", required=True)
TENANT = Str("tenant", "the tenant whose registry (default: your first)")
TYPES = ("avro", "json", "protobuf")
LEVELS = tuple(level.lower() for level in Compatibility.values)
# `-level default` clears a subject's own level, so the tenant's default applies again.
CLEAR = "default"


def access_of(user: AbstractBaseUser, opts: dict[str, Any]) -> Access:
    return registryreads.registry_access(actor=user, tenant_name=opts["tenant"])


def version_row(found: SubjectVersion) -> Row:
    schema = found.schema
    return {"subject": found.subject, "version": found.version, "id": found.schema_id,
            "type": schema.schema_type, "guid": str(schema.guid), "deleted": found.deleted,
            "references": schema.references, "schema": schema.text}


def candidate_of(opts: dict[str, Any]) -> registry.Candidate:
    references: Any = None
    if opts.get("references"):
        try:
            references = json.loads(opts["references"])
        except ValueError as error:
            raise InvalidInput(f"-references is not JSON ({error}): give a list such as "
                               '[{"name": "a.proto", "subject": "a", "version": 1}]',
                               field="references") from None
    return registry.Candidate(opts["type"].upper(), opts["schema"], references)


@command("schema/list", TENANT,
         Bool("deleted", "also subjects whose versions are all soft-deleted", default=False),
         summary="List the registry's subjects: versions, latest id and type, compatibility.",
         changes=False)
def schema_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    access = access_of(user, opts)
    access.require("read", "reading the schema registry")
    summaries = registryreads.subject_summaries(access.tenant, deleted=opts["deleted"])
    return [{"subject": s.subject, "versions": s.versions, "latestversion": s.versions[-1],
             "id": s.latest_id, "type": s.schema_type, "compatibility": s.compatibility}
            for s in summaries if s.versions] + [
            {"subject": s.subject, "versions": [], "deleted": True}
            for s in summaries if not s.versions]


@command("schema/info", SUBJECT,
         Str("version", "a version number or latest (default: every live version)"),
         Bool("deleted", "include soft-deleted versions", default=False), TENANT,
         summary="Show a subject's versions with their schema text.", changes=False)
def schema_info(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    access = access_of(user, opts)
    access.require("read", "reading the schema registry")
    if opts["version"] is not None:
        return [version_row(registryreads.subject_version(
            access.tenant, opts["subject"], opts["version"], deleted=opts["deleted"]))]
    found = registryreads.subject_versions(access.tenant, opts["subject"],
                                           deleted=opts["deleted"])
    rows = [version_row(v) for v in found.select_related("schema").order_by("version")]
    if not rows:
        registryreads.subject_version(access.tenant, opts["subject"], "latest")  # 40401
    return rows


CANDIDATE = (
    SUBJECT,
    Choice("type", "the schema's type", choices=TYPES, default="avro"),
    Str("schema", "the schema text (the CLI reads it from a file when it names one)",
        required=True),
    Str("references", 'JSON list of references, [{"name", "subject", "version"}]'),
    TENANT,
)


@command("schema/register", *CANDIDATE,
         summary="Register a schema under a subject: a new version once the subject's "
                 "compatibility allows it, or the version already holding it.",
         changes=True)
def schema_register(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    made = registry.schema_register(access=access_of(user, opts), subject=opts["subject"],
                                    candidate=candidate_of(opts))
    return [version_row(made)]


@command("schema/check", *CANDIDATE,
         Str("version", "check against this version only (default: what the subject's "
                        "level checks)"),
         summary="Test a schema against a subject's compatibility level without registering.",
         changes=False)
def schema_check(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    access = access_of(user, opts)
    problems = registry.compatibility_test(access=access, subject=opts["subject"],
                                           version=opts["version"], candidate=candidate_of(opts))
    level = registryreads.effective(access.tenant, opts["subject"], "compatibility")
    return [{"subject": opts["subject"], "compatibility": level,
             "compatible": not problems, "messages": problems}]


@command("schema/delete", SUBJECT,
         Str("version", "delete only this version (a number or latest)"),
         Bool("permanent", "remove versions already soft-deleted, for good", default=False),
         TENANT,
         summary="Delete a subject or one version: soft first (still readable by id), then "
                 "with -permanent true for good.",
         changes=True)
def schema_delete(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    access = access_of(user, opts)
    if opts["version"] is None:
        numbers = registry.subject_delete(access=access, subject=opts["subject"],
                                          permanent=opts["permanent"])
    else:
        numbers = [registry.version_delete(access=access, subject=opts["subject"],
                                           version=opts["version"],
                                           permanent=opts["permanent"])]
    return [{"subject": opts["subject"], "version": n, "permanent": opts["permanent"]}
            for n in numbers]


@command("schema/compatibility",
         Str("subject", "the subject (default: the tenant's default level)"),
         Choice("level", f"set the level; {CLEAR} clears a subject's own level",
                choices=(*LEVELS, CLEAR)),
         TENANT,
         summary="Show, or with -level set, the compatibility level of a subject or of the "
                 "whole registry.",
         changes=True)
def schema_compatibility(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    access, subject, level = access_of(user, opts), opts["subject"], opts["level"]
    if level is not None:
        if level == CLEAR and not subject:
            raise InvalidInput(f"-level {CLEAR} clears a subject's own level: give -subject, "
                               "or one of " + ", ".join(LEVELS), field="level")
        registry.registry_config_set(access=access, subject=subject, field="compatibility",
                                     value=None if level == CLEAR else level)
    else:
        access.require("read", "reading the schema registry")
    own = registryreads.config_of(access.tenant, subject, "compatibility")
    shown = registryreads.effective(access.tenant, subject or "", "compatibility")
    return [{"subject": subject or "", "compatibility": shown,
             "source": "subject" if subject and own else "default" if subject else
             "registry" if own else "default"}]
