"""The stream page's failover: a button on a replica's page, a confirmation page, the same
service as the API; members without adminperm and outsiders get nothing."""

from __future__ import annotations

import re

import pytest

from replication.engine.store import Record
from replication.models import Failover, ReplicaLink, Stream, Topic
from replication.services import replica_add, replica_failover, topic_create, upstream_add
from replication.services.messages import messages_produce
from tests.clients import signed_in


@pytest.fixture
def pair(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks")
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


def tab(client, stream) -> str:  # type: ignore[no-untyped-def]
    """The stream's Replication tab, where failovers, failback and verification are."""
    return client.get(f"/streams/{stream.pk}/replication/").content.decode()


def test_a_replicas_page_offers_the_failover_and_its_source_page_does_not(owner, pair):
    source, replica = pair
    client = signed_in(owner)
    assert 'id="failover-link"' in tab(client, replica)
    assert 'id="failover-link"' not in tab(client, source)


def test_the_confirmation_page_names_the_source_and_a_confirmed_form_fails_over(owner, pair):
    source, replica = pair
    client = signed_in(owner)
    page = client.get(f"/streams/{replica.pk}/failover/").content.decode()
    assert source.path in page and 'id="failover-form"' in page
    response = client.post(f"/streams/{replica.pk}/failover/", {"confirm": "yes"}, follow=True)
    assert f"took over from {source.path}" in response.content.decode()
    assert Topic.objects.get(stream=replica).origin_uuid == replica.uuid
    page = client.get(f"/streams/{replica.pk}/replication/").content.decode()
    assert 'id="failovers"' in page and "planned" in page


def test_an_unconfirmed_form_changes_nothing(owner, pair):
    _source, replica = pair
    response = signed_in(owner).post(f"/streams/{replica.pk}/failover/", {}, follow=True)
    assert "tick the confirmation box" in response.content.decode()
    assert ReplicaLink.objects.count() == 1 and not Failover.objects.exists()


def test_a_member_without_adminperm_sees_no_button_and_is_refused(owner, member, pair):
    _source, replica = pair
    replica.consumeperm = f"u:{owner.username} | u:{member.username}"
    replica.save()
    client = signed_in(member)
    assert 'id="failover-link"' not in tab(client, replica)
    response = client.post(f"/streams/{replica.pk}/failover/", {"confirm": "yes"}, follow=True)
    assert "adminperm" in response.content.decode()
    assert ReplicaLink.objects.count() == 1 and not Failover.objects.exists()


def test_an_outsider_gets_404_and_changes_nothing(outsider, pair):
    source, replica = pair
    client = signed_in(outsider)
    assert client.get(f"/streams/{replica.pk}/failover/").status_code == 404
    assert client.post(f"/streams/{replica.pk}/failover/", {"confirm": "yes"}).status_code == 404
    assert ReplicaLink.objects.count() == 1
    assert Stream.objects.get(pk=source.pk).producers_stopped == ""


@pytest.fixture
def failed_over(owner, pair):
    source, replica = pair
    replica_failover(replica=replica, force=True, actor=owner)
    messages_produce(actor=owner, stream=replica, topic="clicks",
                     records=[Record(value=b"second-%d" % i) for i in range(3)])
    return source, replica, Failover.objects.get()


def test_the_failback_wizard_shows_the_dry_run_then_fails_back(owner, failed_over):
    source, replica, _failover = failed_over
    client = signed_in(owner)
    page = client.get(f"/streams/{replica.pk}/replication/").content.decode()
    assert f"/streams/{replica.pk}/failback/" in page
    wizard = client.get(f"/streams/{replica.pk}/failback/").content.decode()
    assert 'id="failback-plan"' in wizard and "3 to copy" in wizard
    assert ReplicaLink.objects.count() == 0  # the dry run changed nothing
    response = client.post(f"/streams/{replica.pk}/failback/",
                           {"confirm": "yes"}, follow=True)
    assert f"{source.path} is back" in response.content.decode()
    assert set(ReplicaLink.objects.values_list("source", "replica")) == {(source.pk,
                                                                          replica.pk)}


def test_the_failback_wizard_is_404_to_an_outsider(outsider, failed_over):
    _source, replica, _failover = failed_over
    client = signed_in(outsider)
    url = f"/streams/{replica.pk}/failback/"
    assert client.get(url).status_code == 404
    assert client.post(url, {"confirm": "yes"}).status_code == 404
    assert Failover.objects.get().failed_back_at is None


def test_verify_now_on_the_source_page_records_the_result(owner, outsider, pair):
    source, replica = pair
    client = signed_in(owner)
    page = client.get(f"/streams/{source.pk}/replication/").content.decode()
    link = ReplicaLink.objects.get()
    assert f"/streams/{source.pk}/verify/{link.pk}/" in page
    response = client.post(f"/streams/{source.pk}/verify/{link.pk}/", follow=True)
    assert f"{replica.path} verified" in response.content.decode()
    assert ReplicaLink.objects.get().last_verified is not None
    assert signed_in(outsider).post(f"/streams/{source.pk}/verify/{link.pk}/").status_code == 404


def test_the_failback_page_of_a_stream_that_took_over_from_none_says_so(owner, pair):
    _source, replica = pair
    page = signed_in(owner).get(f"/streams/{replica.pk}/failback/").content.decode()
    assert "nothing to fail back" in page and 'id="failback-form"' not in page


# -- refusals beside what they are about, what was ticked kept -------------------------------

def _beside(page: str, name: str, *, tied: bool = True) -> str:
    """The error shown beside the input or row button `name` names, tied to it for readers
    (unless the page shows this user no button there)."""
    error = re.search(rf'<span class="field-error" id="err-{name}" role="alert">(.+?)</span>',
                      page)
    assert error, f"no error beside {name}"
    assert (f'aria-describedby="err-{name}"' in page) == tied
    return error.group(1)


def _tick(page: str, name: str) -> str:
    """The label of the checkbox `name`: the box, its words and its error."""
    return re.search(rf'<label class="inline"><input type="checkbox" name="{name}".*?</label>',
                     page, re.S).group(0)


def test_an_unticked_failover_says_so_beside_the_box_and_keeps_force(owner, pair):
    _source, replica = pair
    response = signed_in(owner).post(f"/streams/{replica.pk}/failover/", {"force": "on"})
    assert response.status_code == 400
    page = response.content.decode()
    confirm = _tick(page, "confirm")
    assert "tick the confirmation box to fail over" in _beside(confirm, "confirm")
    assert " checked" in _tick(page, "force") and 'id="err-form"' not in page
    assert ReplicaLink.objects.count() == 1 and not Failover.objects.exists()


def test_a_failover_from_a_stream_that_is_no_source_is_refused_beside_the_source(owner, pair,
                                                                               activity_ny):
    source, replica = pair
    client = signed_in(owner)
    page = client.get(f"/streams/{replica.pk}/failover/").content.decode()
    assert f'<option value="{source.path}">' in page
    for path, words in ((activity_ny.path, f"is not a replica of {activity_ny.path}"),
                        ("/mapr/sanfrancisco/nowhere", "does not exist")):
        response = client.post(f"/streams/{replica.pk}/failover/",
                               {"source": path, "force": "on", "confirm": "yes"})
        assert response.status_code == 400
        page = response.content.decode()
        assert words in _beside(page, "source")
        assert " checked" in _tick(page, "force") and " checked" in _tick(page, "confirm")
    assert not Failover.objects.exists()
    assert Topic.objects.get(stream=replica).origin_uuid == source.uuid


def test_an_unticked_failback_says_so_beside_the_box_and_keeps_the_dry_run(owner,
                                                                           failed_over):
    _source, replica, _failover = failed_over
    response = signed_in(owner).post(f"/streams/{replica.pk}/failback/", {"reverse": "on"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "tick the confirmation box to fail back" in _beside(_tick(page, "confirm"),
                                                               "confirm")
    assert " checked" in _tick(page, "reverse")
    assert 'id="failback-plan"' in page and "3 to copy" in page
    assert Failover.objects.get().failed_back_at is None and ReplicaLink.objects.count() == 0


def _row(page: str, table: str, path: str) -> str:
    rows = re.search(rf'<table id="{table}".*?</table>', page, re.S).group(0)
    return re.search(rf"<tr[^>]*><td[^>]*><code>{re.escape(path)}</code>.*?</tr>", rows,
                     re.S).group(0)


def test_a_refused_verify_now_shows_beside_its_replicas_row(owner, activity, activity_ny):
    link = replica_add(actor=owner, source=activity, replica=activity_ny)  # not accepted yet
    response = signed_in(owner).post(f"/streams/{activity.pk}/verify/{link.pk}/")
    assert response.status_code == 400
    row = _row(response.content.decode(), "verification", activity_ny.path)
    assert "has not accepted" in _beside(row, f"verify-{link.pk}")
    assert ReplicaLink.objects.get().last_verified is None


def test_a_refused_pause_or_remove_shows_beside_its_replicas_row(owner, member, pair):
    source, replica = pair
    source.consumeperm = f"u:{owner.username} | u:{member.username}"
    source.save()
    link = ReplicaLink.objects.get()
    client = signed_in(member)
    for action in ("pause", "remove"):
        response = client.post(f"/streams/{source.pk}/replicas/{link.pk}/{action}/")
        assert response.status_code == 400
        row = _row(response.content.decode(), "replicas", replica.path)
        assert "adminperm" in _beside(row, f"replica-{link.pk}", tied=False), action
    assert ReplicaLink.objects.filter(paused=False).count() == 1
