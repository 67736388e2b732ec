"""The members page of the current tenant: who is in it, with which role, since when. Its
administrators change roles, remove members (after a confirmation page) and invite by one-time
link; everyone else reads the list. A membership or invitation is reached through
`restrict(user)`, so another tenant's answers 404. The rules (the last administrator stays,
who may do what) are the services' (replication/services/members.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.models import Invitation, Membership, Role, Tenant
from portal.web.forms import FORM, field_errors
from portal.web.tenancy import current_tenant, render_page
from replication.errors import StreamgateError
from replication.services.members import (
    INVITATION_DAYS,
    invitation_create,
    invitation_revoke,
    membership_remove,
    membership_role_change,
)

INVITE_FIELDS = ("role", "email", "days")
LINK_KEY = "streamgate_invitation_link"  # the new link, shown once on the next page
INVITATIONS_SHOWN = 50


def _page(request: HttpRequest, tenant: Tenant | None, *, errors: dict[str, str] | None = None,
          invite: dict[str, str] | None = None, status: int = 200) -> HttpResponse:
    context: dict[str, Any] = {"tenant": tenant, "errors": errors or {}, "roles": Role.choices,
                               "days": INVITATION_DAYS, "invite": invite or {"days": "7"}}
    if tenant is not None:
        admin = tenant.administered_by(request.user)
        context["admin"] = admin
        context["members"] = (Membership.objects.filter(tenant=tenant).select_related("user")
                              .order_by("user__username"))
        if admin:
            now = timezone.now()
            invitations = list(Invitation.objects.filter(tenant=tenant).select_related(
                "created_by", "used_by")[:INVITATIONS_SHOWN])
            context["invitations"] = [(i, i.state(now)) for i in invitations]
            context["new_link"] = request.session.pop(LINK_KEY, None)
    return render_page(request, "web/members.html", context, status=status)


def _refused(request: HttpRequest, tenant: Tenant, err: StreamgateError) -> HttpResponse:
    return _page(request, tenant, errors={FORM: field_errors(err, ())[FORM]},
                 status=err.http_status)


@login_required
def members(request: HttpRequest) -> HttpResponse:
    return _page(request, current_tenant(request))


@login_required
@require_POST
def invite(request: HttpRequest) -> HttpResponse:
    tenant = current_tenant(request)
    if tenant is None:
        raise Http404("you belong to no tenant")
    form = {name: request.POST.get(name, "").strip() for name in INVITE_FIELDS}
    try:
        days = int(form["days"] or "7")
    except ValueError:
        return _page(request, tenant, errors={"days": "choose how many days the link is valid"},
                     invite=form, status=400)
    try:
        _, token = invitation_create(actor=request.user, tenant=tenant, role=form["role"],
                                     email=form["email"], days=days)
    except StreamgateError as err:
        return _page(request, tenant, errors=field_errors(err, INVITE_FIELDS), invite=form,
                     status=err.http_status)
    request.session[LINK_KEY] = request.build_absolute_uri(
        reverse("invitation-accept", args=[token]))
    messages.success(request, "Invitation created: copy its link now, it is shown only once")
    return redirect("members")


def _membership(request: HttpRequest, pk: int) -> Membership:
    return get_object_or_404(Membership.objects.restrict(request.user)
                             .select_related("user", "tenant"), pk=pk)


@login_required
@require_POST
def member_role(request: HttpRequest, pk: int) -> HttpResponse:
    membership = _membership(request, pk)
    try:
        membership_role_change(actor=request.user, membership=membership,
                               role=request.POST.get("role", ""))
    except StreamgateError as err:
        return _refused(request, membership.tenant, err)
    messages.success(request, f"{membership.user.get_username()} is now {membership.role} of "
                              f"{membership.tenant.name}")
    return redirect("members")


@login_required
def member_remove(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the confirmation page; POST: the removal."""
    membership = _membership(request, pk)
    if request.method != "POST":
        admin = membership.tenant.administered_by(request.user)
        return render_page(request, "web/member_remove.html",
                           {"membership": membership, "admin": admin,
                            "self": membership.user_id == request.user.pk},
                           status=200 if admin else 403)
    try:
        membership_remove(actor=request.user, membership=membership)
    except StreamgateError as err:
        return _refused(request, membership.tenant, err)
    messages.success(request, f"{membership.user.get_username()} removed from "
                              f"{membership.tenant.name}")
    if membership.user_id == request.user.pk:
        return redirect("overview")  # the members page of a tenant left is no longer theirs
    return redirect("members")


@login_required
@require_POST
def invitation_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    invitation = get_object_or_404(Invitation.objects.restrict(request.user)
                                   .select_related("tenant"), pk=pk)
    try:
        invitation_revoke(actor=request.user, invitation=invitation)
    except StreamgateError as err:
        return _refused(request, invitation.tenant, err)
    messages.success(request, "Invitation revoked: its link no longer works")
    return redirect("members")
