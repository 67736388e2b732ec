"""The Schemas pages' forms: register a schema (its compatibility checked first, on request,
and again as it is registered), set a subject's or the registry's compatibility level, delete
a version or a subject after typing the subject's name. Every change goes through
replication/services/registry.py, as the registry's REST API and `streamgate schema` do, so
the same roles apply (a member registers; deleting and settings need an admin-scope token,
which a browser session holds) and the model signals audit it with the web as interface.

The subject travels as a form field, not in the URL: a subject name may hold any character,
slashes included, and the subject page's own URL already takes the rest of the path."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.web.tenancy import current_tenant, render_page
from replication.errors import InvalidInput, StreamgateError
from replication.schemas.errors import (
    IncompatibleSchema,
    InvalidCompatibility,
    InvalidSchema,
    VersionNotSoftDeleted,
)
from replication.schemas.formats import TYPES
from replication.services import registry, registryreads
from replication.services.registryreads import NEEDS, Access

REGISTER_FIELDS = ("subject", "schema_type", "schema")


def page_access(request: HttpRequest) -> Access:
    """The signed-in user in the page's current tenant; none: nothing to show (404)."""
    tenant = current_tenant(request)
    if tenant is None:
        raise Http404("you belong to no tenant, and schemas belong to tenants")
    return registryreads.registry_access(actor=request.user, tenant_name=tenant.name)


def may(access: Access, kind: str) -> bool:
    """Whether the page offers the forms of `kind` (the services decide in the end)."""
    return access.role in NEEDS[kind][0]


def _subject_url(subject: str) -> str:
    return reverse("schema-subject", args=[subject])


def _register_error(err: StreamgateError) -> dict[str, str]:
    """The refusal beside the input it is about (the registry's errors name no field)."""
    if isinstance(err, IncompatibleSchema | InvalidSchema):
        return {"schema": err.desc}
    if isinstance(err, InvalidInput) and "subject" in err.desc:
        return {"subject": err.desc}
    return {"form": err.desc}


def _latest(access: Access, subject: str) -> Any:
    versions = registryreads.subject_versions(access.tenant, subject).select_related("schema")
    return versions.order_by("-version").first()


def _initial(access: Access, subject: str) -> dict[str, str]:
    """A new version starts from the latest one's text and type."""
    latest = _latest(access, subject) if subject else None
    if latest is None:
        return {"subject": subject, "schema_type": "AVRO", "schema": ""}
    return {"subject": subject, "schema_type": latest.schema.schema_type,
            "schema": latest.schema.text}


@login_required
def schema_register_view(request: HttpRequest) -> HttpResponse:
    """GET: the form (?subject= for a new version); POST action=check: the compatibility
    result, nothing registered; POST action=register: registered, or the refusal beside its
    field with what was typed."""
    access = page_access(request)
    if request.method != "POST":
        typed = _initial(access, request.GET.get("subject", "").strip())
        return _register_page(request, access, typed, {}, None)
    typed = {name: request.POST.get(name, "") for name in REGISTER_FIELDS}
    typed["subject"] = typed["subject"].strip()
    candidate = registry.Candidate(typed["schema_type"] or "AVRO", typed["schema"], None)
    checked: dict[str, Any] | None = None
    try:
        if not typed["subject"]:
            raise InvalidInput("give the subject's name, e.g. orders-value")
        checked = _check(access, typed["subject"], candidate)
        if request.POST.get("action") == "register":
            return _register(request, access, typed["subject"], candidate, checked)
    except StreamgateError as err:
        return _register_page(request, access, typed, _register_error(err), checked,
                              status=409 if isinstance(err, IncompatibleSchema) else 400)
    return _register_page(request, access, typed, {}, checked)


def _check(access: Access, subject: str, candidate: registry.Candidate) -> dict[str, Any]:
    problems = registry.compatibility_test(access=access, subject=subject, version=None,
                                           candidate=candidate)
    latest = _latest(access, subject)
    return {"level": registryreads.effective(access.tenant, subject, "compatibility"),
            "problems": problems, "against": latest.version if latest else None}


def _register(request: HttpRequest, access: Access, subject: str,
              candidate: registry.Candidate, checked: dict[str, Any]) -> HttpResponse:
    before = _latest(access, subject)
    made = registry.schema_register(access=access, subject=subject, candidate=candidate)
    if before is not None and made.version <= before.version:
        messages.info(request, f"{subject} already holds this schema as version "
                               f"{made.version} (id {made.schema_id}): nothing registered")
    else:
        against = (f"compatible ({checked['level']}) with version {checked['against']}"
                   if checked["against"] else "the subject's first version")
        messages.success(request, f"version {made.version} of {subject} registered with "
                                  f"schema id {made.schema_id}: {against}")
    return redirect(_subject_url(subject))


def _register_page(request: HttpRequest, access: Access, typed: dict[str, str],
                   errors: dict[str, str], checked: dict[str, Any] | None,
                   status: int = 200) -> HttpResponse:
    return render_page(request, "web/schema_register.html", {
        "typed": typed, "errors": errors, "checked": checked, "types": TYPES,
        "can_write": may(access, "write"),
        "existing": bool(typed["subject"] and _latest(access, typed["subject"]))},
        status=status)


@login_required
@require_POST
def schema_compatibility_view(request: HttpRequest) -> HttpResponse:
    """Set (or with level "" clear) a subject's level, or without a subject the registry's
    default; back to the page it came from, with the outcome."""
    access = page_access(request)
    subject = request.POST.get("subject", "").strip()
    level = request.POST.get("compatibility", "").strip()
    target = _subject_url(subject) if subject else reverse("schemas")
    try:
        if subject and _latest(access, subject) is None:
            raise Http404("no such subject in this tenant's schema registry")
        if not level and not subject:
            raise InvalidCompatibility("choose the registry's default level")
        registry.registry_config_set(access=access, subject=subject or None,
                                     field="compatibility", value=level or None)
    except StreamgateError as err:
        messages.error(request, f"compatibility not changed: {err.desc}")
        return redirect(target)
    shown = registryreads.effective(access.tenant, subject, "compatibility")
    whose = f"{subject}'s" if subject else "the registry's default"
    messages.success(request, f"{whose} compatibility is now {shown}"
                              + ("" if level else " (the registry's default)"))
    return redirect(target)


@login_required
def schema_delete_view(request: HttpRequest) -> HttpResponse:
    """GET: what deleting does and a field to type the subject's name in; POST: delete (soft,
    or permanently: soft first, then for good, in one transaction) if the name typed is the
    subject's."""
    access = page_access(request)
    source = request.POST if request.method == "POST" else request.GET
    subject, version = source.get("subject", "").strip(), source.get("version", "").strip()
    found = registryreads.subject_versions(access.tenant, subject, deleted=True)
    if not subject or not found.exists():
        raise Http404("no such subject in this tenant's schema registry")
    context: dict[str, Any] = {"subject": subject, "version": version, "error": "",
                               "typed": source.get("confirm", ""),
                               "permanent": source.get("permanent") == "true",
                               "can_admin": may(access, "admin")}
    if request.method == "POST":
        try:
            if context["typed"].strip() != subject:
                raise InvalidInput(f"type the subject's name, {subject}, to delete")
            done = _delete(access, subject, version, context["permanent"])
        except StreamgateError as err:
            context["error"] = err.desc
        else:
            messages.success(request, done)
            live = registryreads.subject_versions(access.tenant, subject).exists()
            return redirect(_subject_url(subject) if live else reverse("schemas"))
    return render_page(request, "web/schema_delete.html", context,
                       status=400 if context["error"] else 200)


def _delete(access: Access, subject: str, version: str, permanent: bool) -> str:
    with transaction.atomic():
        if version:
            try:
                number = registry.version_delete(access=access, subject=subject,
                                                 version=version, permanent=False)
            except StreamgateError:
                if not permanent:
                    raise
                number = registryreads.version_number(version)  # soft-deleted already
            if permanent:
                registry.version_delete(access=access, subject=subject, version=str(number),
                                        permanent=True)
            return f"version {number} of {subject} deleted" + (" for good" if permanent else "")
        if registryreads.subject_versions(access.tenant, subject).exists():
            registry.subject_delete(access=access, subject=subject, permanent=False)
        elif not permanent:
            raise VersionNotSoftDeleted(f"{subject}'s versions are deleted already: tick "
                                        "'for good' to remove them")
        if permanent:
            registry.subject_delete(access=access, subject=subject, permanent=True)
        return f"subject {subject} deleted" + (" for good" if permanent else "")
