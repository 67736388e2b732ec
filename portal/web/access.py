"""The Access tab's check of who may do what: what the signed-in user may do on the stream,
and for the stream's administrators, what a member of its tenant may (only that tenant's
members are looked up: another tenant's user names are not this page's to confirm)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest

from replication.models import PERMISSIONS, Stream

# What each permission lets a holder do, in the words of the portal and the CLI.
MEANS = {"produceperm": "produce messages", "consumeperm": "consume messages and reset "
         "consumer group offsets", "topicperm": "create, change and delete topics",
         "copyperm": "copy the stream (copystream, replication set-up)",
         "adminperm": "change the stream, its ACEs and its replicas"}


def _rows(stream: Stream, user: AbstractBaseUser) -> list[tuple[str, str, bool]]:
    held = stream.perms_of(user)
    return [(perm, MEANS[perm], perm in held) for perm in PERMISSIONS]


def access_check(request: HttpRequest, stream: Stream, is_admin: bool) -> dict[str, Any]:
    """The tab's context: the user's own rows, and (admins) those of the member asked about
    in `?who=`, or the error beside that field."""
    context: dict[str, Any] = {"mine": _rows(stream, request.user)}
    who = request.GET.get("who", "").strip()
    if not is_admin or not who:
        return context
    context["who"] = who
    member = (get_user_model().objects
              .filter(username=who, memberships__tenant_id=stream.tenant_id).first())
    if member is None:
        context["who_error"] = (f"{stream.tenant.name} has no member called {who}: check the "
                                f"name on the Members page")
    else:
        context["theirs"] = _rows(stream, member)
    return context
