"""Closing a user's live sockets (the portal's websockets) when what opened them ends.

A socket joins the groups of its user and of its sign-in session (group names here, so the
consumer above and the receivers below agree without importing each other). Once a change is
committed, `revoked` goes to the group: the session's on sign-out, the user's when a
membership is removed or the user deactivated or deleted. The consumer leaves its tenant
groups and closes the socket; a page that reconnects joins what the user still belongs to, or
is refused when signed out.
"""

from __future__ import annotations

import hashlib
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from accounts.models import Membership

REVOKED = "accounts.revoked"  # the channel-layer message type (consumer method accounts_revoked)


def user_group(user_id: int) -> str:
    return f"user.{user_id}.sockets"


def session_group(session_key: str) -> str:
    # A digest: group names travel through Redis, where the key itself would be a sign-in.
    return f"session.{hashlib.sha256(session_key.encode()).hexdigest()[:40]}.sockets"


def close_after_commit(group: str, reason: str) -> None:
    def send() -> None:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(group, {"type": REVOKED, "reason": reason})

    # robust: the change is committed either way; a channel-layer outage must not fail it.
    transaction.on_commit(send, robust=True)


def _signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        close_after_commit(session_group(session_key), "signed out")


def _membership_removed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    close_after_commit(user_group(instance.user_id), "membership removed")


def _user_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    if not instance.is_active:
        close_after_commit(user_group(instance.pk), "user deactivated")


def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    close_after_commit(user_group(instance.pk), "user deleted")


def connect_receivers() -> None:
    """Called once, from AccountsConfig.ready."""
    user_model = get_user_model()
    user_logged_out.connect(_signed_out, dispatch_uid="accounts.sockets.signed_out")
    post_delete.connect(_membership_removed, sender=Membership,
                        dispatch_uid="accounts.sockets.membership_removed")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="accounts.sockets.user_saved")
    post_delete.connect(_user_deleted, sender=user_model,
                        dispatch_uid="accounts.sockets.user_deleted")
