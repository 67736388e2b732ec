"""The one authorization cache (replication/grants.py): answers are kept, and an ACE or a
membership changed is seen by the very next call, without waiting for the cache to expire."""

from __future__ import annotations

import pytest

from accounts.models import Membership
from replication.errors import PermissionDenied
from replication.grants import cached_perms, grants_require, perms_held
from replication.models import Stream
from replication.services import stream_edit


def test_an_answer_is_kept(owner, activity, django_assert_num_queries):
    held = perms_held(owner, activity)
    assert "produceperm" in held
    with django_assert_num_queries(0):
        assert perms_held(owner, activity) == held
        assert cached_perms(owner, activity) == held


def test_an_ace_granted_is_seen_by_the_next_call(owner, member, activity):
    with pytest.raises(PermissionDenied):
        grants_require(member, activity, "produceperm", action="produce")
    stream_edit(actor=owner, stream=activity,
                produceperm=f"u:{owner.username} | u:{member.username}")
    grants_require(member, Stream.objects.get(pk=activity.pk), "produceperm", action="produce")


def test_an_ace_granted_elsewhere_is_seen_by_the_next_call(owner, member, activity):
    """Another process's edit fires no signal here: the ACE text is part of the key."""
    assert "consumeperm" not in perms_held(member, activity)
    Stream.objects.filter(pk=activity.pk).update(consumeperm=f"u:{member.username}")
    assert "consumeperm" in perms_held(member, Stream.objects.get(pk=activity.pk))


def test_a_membership_removed_is_seen_by_the_next_call(owner, activity):
    stream = Stream.objects.get(pk=activity.pk)
    stream.consumeperm = "r:member"
    stream.save()
    assert "consumeperm" in perms_held(owner, stream)
    Membership.objects.filter(user=owner).delete()
    assert "consumeperm" not in perms_held(owner, stream)
    assert cached_perms(owner, stream) is not None  # read again, and kept again
