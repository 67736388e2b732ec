"""Admin for cluster operators: tenants, users and who belongs where.

An operator is a staff account (`is_staff`), the same test the services apply
(`replication.services.clusters._operator_only`); so the admin grants its pages by that flag
instead of by Django's per-model permissions, which nothing in streamgate assigns.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from accounts.models import Membership, Tenant

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


class TenantMembershipInline(OperatorAccess, admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role", "created")
    readonly_fields = ("created",)
    autocomplete_fields = ("user",)


class UserMembershipInline(OperatorAccess, admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("tenant", "role", "created")
    readonly_fields = ("created",)
    autocomplete_fields = ("tenant",)


@admin.register(Tenant)
class TenantAdmin(OperatorAccess, admin.ModelAdmin):
    list_display = ("name", "member_count", "stream_count", "created")
    search_fields = ("name",)
    readonly_fields = ("created",)
    inlines = (TenantMembershipInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).annotate(
            member_total=Count("memberships", distinct=True),
            stream_total=Count("streams", distinct=True),
        )

    @admin.display(description="members", ordering="member_total")
    def member_count(self, tenant: Tenant) -> int:
        return tenant.member_total  # type: ignore[attr-defined]

    @admin.display(description="streams", ordering="stream_total")
    def stream_count(self, tenant: Tenant) -> int:
        return tenant.stream_total  # type: ignore[attr-defined]


admin.site.unregister(User)


@admin.register(User)
class StreamgateUserAdmin(OperatorAccess, UserAdmin):
    inlines = (UserMembershipInline,)
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
