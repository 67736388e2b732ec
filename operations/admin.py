"""Alarms and the audit trail for operators: read-only, since the engine raises and clears alarms
and the audit trail is only ever appended to."""

from __future__ import annotations

from django.contrib import admin

from accounts.admin import ReadOnlyAccess
from operations.models import Alarm, AuditEvent


@admin.register(Alarm)
class AlarmAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("kind", "entity", "is_open", "raised", "cleared", "description")
    list_filter = ("kind", ("cleared", admin.EmptyFieldListFilter), "raised")
    search_fields = ("entity", "description")
    date_hierarchy = "raised"
    readonly_fields = [f.name for f in Alarm._meta.fields]

    @admin.display(boolean=True, description="open")
    def is_open(self, alarm: Alarm) -> bool:
        return alarm.is_open


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("at", "actor_name", "interface", "tenant_name", "action", "object_type",
                    "object_repr")
    list_filter = ("interface", "action", "object_type", "at")
    search_fields = ("actor_name", "tenant_name", "object_repr", "object_id", "request_id")
    date_hierarchy = "at"
    # The raw ids, not the relations: the rows they named may be gone.
    fields = readonly_fields = ("at", "actor_id", "actor_name", "interface", "request_id",
                                "tenant_id", "peer_tenant_id", "tenant_name", "object_type",
                                "object_id", "object_repr", "action", "before", "after")
