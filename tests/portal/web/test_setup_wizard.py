"""The set-up wizard and autosetup speak the page's language: refusals name the form's fields
(never a CLI flag such as -source), another tenant's stream is said to be not the user's
(not "does not exist ... create it"), and the fields offer the user's own streams and a path
on each cluster to pick from."""

from __future__ import annotations

import re

import pytest

from portal.web.hints import form_words
from replication.models import ReplicaLink, Stream
from tests.clients import signed_in
from tests.factories import StreamFactory

FLAG = re.compile(r"(?<![\w/])-(source|replica|path|copymetafrom|upstream|useexistingreplica)\b")
WIZARDS = ["/setup/manual/", "/setup/auto/"]


@pytest.fixture
def theirs(outsider, sanfrancisco):
    return StreamFactory(path="/mapr/sanfrancisco/secret", cluster=sanfrancisco,
                         tenant=outsider.memberships.get().tenant, created_by=outsider)


def errors_of(page: str) -> dict[str, str]:
    found = dict(re.findall(r'id="err-(\w+)" role="alert">(.*?)</span>', page, re.S))
    summary = re.findall(r'<li class="error">(.*?)</li>', page, re.S)
    return {**found, "summary": " ".join(summary)}


def streams() -> list[str]:
    return sorted(Stream.objects.values_list("path", flat=True))


@pytest.mark.parametrize("url", WIZARDS)
def test_another_tenants_source_is_not_yours(owner, activity, theirs, newyork, url):
    before = streams()
    response = signed_in(owner).post(url, {"source": theirs.path,
                                           "replica": "/mapr/newyork/mine"})
    errors = errors_of(response.content.decode())
    assert response.status_code == 400
    assert errors["source"] == ("stream /mapr/sanfrancisco/secret is not yours (another "
                                "tenant&#x27;s): pick one of your streams as the source")
    assert "does not exist" not in str(errors) and "create" not in str(errors)
    assert streams() == before and not ReplicaLink.objects.exists()


@pytest.mark.parametrize("url", WIZARDS)
def test_another_tenants_replica_path_is_refused_before_anything_is_made(
        owner, activity, theirs, url):
    before = streams()
    response = signed_in(owner).post(url, {"source": activity.path, "replica": theirs.path})
    errors = errors_of(response.content.decode())
    assert errors["replica"] == ("/mapr/sanfrancisco/secret is another tenant&#x27;s stream, "
                                 "not yours: choose another path for the replica")
    assert streams() == before and not ReplicaLink.objects.exists()


@pytest.mark.parametrize("url", WIZARDS)
@pytest.mark.parametrize(("source", "replica", "field", "expected"), [
    ("/mapr/sanfrancisco/nowhere", "/mapr/newyork/x", "source",
     "stream /mapr/sanfrancisco/nowhere does not exist: check the source"),
    ("", "/mapr/newyork/x", "source", "the source stream is required"),
    ("/mapr/sanfrancisco/activity", "newyork/x", "replica", "write it as /mapr/"),
])
def test_refusals_name_the_forms_fields_never_a_cli_flag(owner, activity, newyork, url,
                                                         source, replica, field, expected):
    page = signed_in(owner).post(url, {"source": source, "replica": replica}).content.decode()
    errors = errors_of(page)
    assert expected in errors[field], errors
    assert not any(FLAG.search(text) for text in errors.values()), errors


def test_form_words_leaves_hyphens_paths_and_numbers_alone():
    assert form_words("check -source, or -ttl 5", {"source": "the source stream"}) == \
        "check the source stream, or the ttl field 5"
    assert form_words("multi-master on /mapr/new-york/a-b at -1") == \
        "multi-master on /mapr/new-york/a-b at -1"


@pytest.mark.parametrize("url", WIZARDS)
def test_the_fields_offer_the_users_streams_and_a_path_on_each_cluster(
        owner, activity, activity_ny, theirs, url):
    page = signed_in(owner).get(url).content.decode()
    source = re.search(r'<datalist id="source-choices">(.*?)</datalist>', page, re.S)[1]
    assert re.findall(r'value="([^"]+)"', source) == [activity_ny.path, activity.path]
    assert 'list="source-choices"' in page and 'list="replica-choices"' in page
    typed = signed_in(owner).post(url, {"source": activity.path, "replica": ""})
    replica = re.search(r'<datalist id="replica-choices">(.*?)</datalist>',
                        typed.content.decode(), re.S)[1]
    assert re.findall(r'value="([^"]+)"', replica) == ["/mapr/newyork/activity",
                                                      "/mapr/sanfrancisco/activity"]


def test_the_jobs_form_offers_the_tenants_streams_for_both_paths(owner, activity, activity_ny,
                                                                 theirs):
    """The jobs form's source and destination pickers: the tenant's streams (never another
    tenant's), on the page and again beside a refusal."""
    for response in (signed_in(owner).get("/jobs/"),
                     signed_in(owner).post("/jobs/start/", {"kind": "copystream",
                                                           "source": theirs.path})):
        page = response.content.decode()
        for field in ("source", "destination"):
            picker = re.search(rf'<datalist id="{field}-choices">(.*?)</datalist>', page, re.S)
            assert re.findall(r'value="([^"]+)"', picker[1]) == [activity_ny.path, activity.path]
            assert f'list="{field}-choices"' in page
