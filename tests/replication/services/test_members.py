"""The membership services under concurrency, on real PostgreSQL: two administrators demoting
each other at once leave one administrator, and one invitation accepted twice at once joins
one user; and a tenant waiting for approval gets no stream by a plain Kafka name either."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from accounts.models import Membership, Role, Tenant
from replication.errors import StreamgateError
from replication.models import DefaultStream, Stream
from replication.services.defaultstreams import default_stream_open
from replication.services.members import (
    invitation_accept,
    invitation_create,
    membership_role_change,
)
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


def first_holds_its_transaction(first: Callable[[], object],
                                second: Callable[[], object]) -> list[str]:
    """Run `first` in a transaction left open until `second` has started (and, if it takes a
    lock `first` holds, is waiting for it); what each outcome was, in order: ok or the error."""
    started, outcomes = threading.Event(), {}

    def run(name: str, call: Callable[[], object], hold: bool) -> None:
        try:
            with transaction.atomic():
                call()
                if hold:
                    started.set()
                    threading.Event().wait(0.5)  # second is blocked on our locks meanwhile
            outcomes[name] = "ok"
        except StreamgateError as error:
            outcomes[name] = str(error)
        finally:
            started.set()
            connection.close()

    one = threading.Thread(target=run, args=("first", first, True))
    two = threading.Thread(target=lambda: (started.wait(), run("second", second, False)))
    one.start()
    two.start()
    one.join(10)
    two.join(10)
    return [outcomes["first"], outcomes["second"]]


def test_two_admins_demoting_each_other_at_once_leave_one_admin(db):
    ann = MembershipFactory(user__username="ann", tenant__name="duo", role=Role.ADMIN)
    ben = MembershipFactory(user__username="ben", tenant=ann.tenant, role=Role.ADMIN)
    first, second = first_holds_its_transaction(
        lambda: membership_role_change(actor=ben.user, membership=ann, role="member"),
        lambda: membership_role_change(actor=ann.user, membership=ben, role="member"))
    assert first == "ok"
    assert "ben is the last administrator of duo" in second
    assert list(Membership.objects.filter(tenant=ann.tenant, role=Role.ADMIN)
                .values_list("user__username", flat=True)) == ["ben"]


def test_one_invitation_accepted_twice_at_once_joins_one_user(db):
    boss = MembershipFactory(user__username="boss", tenant__name="duo", role=Role.ADMIN)
    _, token = invitation_create(actor=boss.user, tenant=boss.tenant, role="member")
    ann = MembershipFactory(user__username="ann", tenant__name="other").user
    ben = MembershipFactory(user__username="ben", tenant__name="third").user
    first, second = first_holds_its_transaction(
        lambda: invitation_accept(actor=ann, token=token),
        lambda: invitation_accept(actor=ben, token=token))
    assert first == "ok" and "has been used already" in second
    assert list(Membership.objects.filter(tenant=boss.tenant).exclude(user=boss.user)
                .values_list("user__username", flat=True)) == ["ann"]


def test_a_waiting_tenant_gets_no_stream_from_a_plain_kafka_name(db, sanfrancisco):
    peter = MembershipFactory(user__username="peter", tenant__name="initech",
                              role=Role.ADMIN).user
    tenant = Tenant.objects.get(name="initech")
    DefaultStream.objects.create(tenant=tenant, cluster=sanfrancisco,
                                 path="/mapr/sanfrancisco/initech", set_by=peter)
    Tenant.objects.filter(pk=tenant.pk).update(approved=False)
    assert default_stream_open(actor=peter, path="/mapr/sanfrancisco/initech") is None
    assert not Stream.objects.exists()
    Tenant.objects.filter(pk=tenant.pk).update(approved=True)
    assert default_stream_open(actor=peter, path="/mapr/sanfrancisco/initech").tenant == tenant
