"""Admin for cluster operators: tenants, users and who belongs where.

An operator is a staff account (`is_staff`), the same test the services apply
(`replication.services.clusters._operator_only`); so the admin grants its pages by that flag
instead of by Django's per-model permissions, which nothing in streamgate assigns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from accounts.models import Invitation, Membership, Plan, ScramCredential, Tenant, TotpDevice
from accounts.secondfactor import has_second_factor

User = get_user_model()


def is_operator(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff)


class OperatorAccess:
    """Mixin for ModelAdmin and inlines: operators see and edit; nobody else does."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_operator(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return is_operator(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request)


def save_each(queryset: QuerySet, **values: Any) -> int:
    """QuerySet.update() for control-plane rows: one save per changed row, so each change is
    audited (update() sends no signals, operations/audit.py). For admin bulk actions, never
    for hot paths."""
    changed = 0
    for row in queryset.exclude(**values):
        for name, value in values.items():
            setattr(row, name, value)
        row.save(update_fields=list(values))
        changed += 1
    return changed


class ReadOnlyAccess(OperatorAccess):
    """Rows that only the services may write: the admin shows them, never changes them,
    so no rule (ACEs, two-way agreement, origin checks) can be bypassed from here."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def count_column(relation: str, description: str) -> Callable[[Any, Any], int]:
    """A sortable list_display column: how many `relation` rows an object has, counted in the
    list's own query (CountingAdmin), not a query per row."""
    total = f"{relation}_total"

    @admin.display(description=description, ordering=total)
    def column(self: Any, obj: Any) -> int:
        return getattr(obj, total)

    column.relation = relation  # type: ignore[attr-defined]
    return column


class CountingAdmin(admin.ModelAdmin):
    """Annotates the list query with the counts its count_column()s show."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        columns = [getattr(self, name, None) for name in self.list_display
                   if isinstance(name, str)]
        relations = [column.relation for column in columns if hasattr(column, "relation")]
        return super().get_queryset(request).annotate(
            **{f"{r}_total": Count(r, distinct=True) for r in relations})


class MembershipInline(OperatorAccess, admin.TabularInline):
    """Memberships under a tenant (naming the user) or under a user (naming the tenant)."""

    model = Membership
    extra = 0
    readonly_fields = ("created",)


class TenantMembershipInline(MembershipInline):
    fields = ("user", "role", "created")
    autocomplete_fields = ("user",)


class UserMembershipInline(MembershipInline):
    fields = ("tenant", "role", "created")
    autocomplete_fields = ("tenant",)


class UserScramInline(OperatorAccess, admin.TabularInline):
    """Which SCRAM mechanisms the user has a password for; an operator may delete one (the
    password itself is set by its user: `streamgate user scram set`, the account page)."""

    model = ScramCredential
    fields = readonly_fields = ("mechanism", "iterations", "updated")
    extra = 0

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Plan)
class PlanAdmin(OperatorAccess, CountingAdmin):
    """Plans an operator assigns to tenants (docs/plans.md). A plan some tenant still has
    cannot be deleted (the admin's page names them): assign them another plan first."""

    list_display = ("name", "max_streams", "max_partitions", "max_stored_bytes",
                    "produce_bytes_rate", "fetch_bytes_rate", "request_rate", "tenant_count")
    search_fields = ("name",)
    readonly_fields = ("created",)
    tenant_count = count_column("tenants", "tenants")


@admin.register(Tenant)
class TenantAdmin(OperatorAccess, CountingAdmin):
    list_display = ("name", "approved", "plan", "member_count", "stream_count",
                    "produce_bytes_rate", "fetch_bytes_rate", "request_rate", "created")
    list_filter = ("approved", "plan")
    search_fields = ("name",)
    readonly_fields = ("created",)
    inlines = (TenantMembershipInline,)
    actions = ("approve",)
    member_count = count_column("memberships", "members")
    stream_count = count_column("streams", "streams")

    @admin.action(description="Approve the selected tenants (signed up, waiting)")
    def approve(self, request: HttpRequest, queryset: QuerySet) -> None:
        changed = save_each(queryset, approved=True)  # one audited save per tenant
        self.message_user(request, f"{changed} tenant(s) approved: their members may now "
                                   "create streams")


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyAccess, admin.ModelAdmin):
    """Invitations as tenant administrators made them; only the tenant's members page revokes
    one, and no token is kept to show."""

    list_display = ("tenant", "role", "email", "created_by", "created", "expires", "used",
                    "used_by", "revoked")
    list_filter = ("role",)
    search_fields = ("tenant__name", "email")
    exclude = ("token_hash",)


class UserTotpInline(UserScramInline):
    """Whether the user has a TOTP second factor; an operator may delete it for a user who
    lost both the app and the recovery codes (never sees its secret)."""

    model = TotpDevice
    fields = readonly_fields = ("confirmed", "created")


admin.site.unregister(User)


@admin.register(User)
class StreamgateUserAdmin(OperatorAccess, UserAdmin):
    inlines = (UserMembershipInline, UserScramInline, UserTotpInline)
    list_display = ("username", "email", "is_active", "is_staff", "tenants")
    list_filter = ("is_staff", "is_superuser", "is_active", "memberships__tenant", "groups")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).prefetch_related("memberships__tenant")

    @admin.display(description="tenants")
    def tenants(self, user: Any) -> str:
        return ", ".join(f"{m.tenant.name} ({m.role})" for m in user.memberships.all())

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Otherwise an operator could set a superuser's password and log in as it.
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # Operators manage accounts, but only a superuser may hand out superuser status or
        # Django permissions; otherwise any operator could promote itself.
        fields = tuple(super().get_readonly_fields(request, obj))
        if request.user.is_superuser:
            return fields
        return (*fields, "is_superuser", "user_permissions")


class SecondFactorAdminAuthForm(AdminAuthenticationForm):
    """The admin's own sign-in form takes a password only: a user with a second factor signs
    in on the portal's sign-in page (which asks for the code), then opens the admin."""

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)
        if has_second_factor(user):
            raise ValidationError(
                "you sign in with a second factor: sign in on the portal's sign-in page "
                "(/login/), which asks for your code, then open the admin",
                code="second_factor")


admin.site.login_form = SecondFactorAdminAuthForm
