"""Bulk jobs in the admin site: operators see every run, read-only (jobs start from the
command line, the API or the portal, where permissions are checked)."""

from django.contrib import admin

from accounts.admin import ReadOnlyAccess
from workers.models import Job


@admin.register(Job)
class JobAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("id", "kind", "state", "source_path", "destination_path", "percent",
                    "requested_by", "created", "finished")
    list_filter = ("kind", "state", "tenant")
    list_select_related = ("requested_by",)
    search_fields = ("source_path", "destination_path")
