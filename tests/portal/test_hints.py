"""A domain error's hint in each interface's idiom: the maprcli command line on /rest (the text
users saw before hints, word for word), a `hint` object beside the message on /api/v1, a link
to the page that does it in the browser."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.rest.hints import command_desc
from portal.web.hints import refusal
from replication.errors import Conflict, Hint, NotFound
from replication.services import replica_failover, replica_pause
from tests.clients import signed_in

NOWHERE = "/mapr/nowhere/x"


def test_rest_shows_the_command_to_run_in_the_maprcli_envelope(owner, api, sanfrancisco):
    response = api(owner).post(f"/rest/stream/create?path={NOWHERE}")
    assert response.status_code == 404
    body = response.json()
    assert body["status"] == "ERROR"
    assert body["errors"] == [{"id": 2, "desc": "cluster nowhere does not exist: list clusters "
                                                "with 'streamgate cluster list'"}]


def test_rest_text_of_a_hint_in_mid_sentence_is_unchanged(owner, agreed):
    replica_pause(actor=owner, source=agreed.source, replica=agreed.replica)
    with pytest.raises(Conflict) as refused:
        replica_failover(replica=agreed.replica, force=True, actor=owner)
    source, replica = agreed.source.path, agreed.replica.path
    assert command_desc(refused.value) == (
        f"the replication {source} -> {replica} is paused, so {replica} may lag far behind: "
        f"resume it ('streamgate stream replica resume -path {source} -replica {replica}') "
        "and let it catch up before failing over")


def test_api_errors_carry_a_hint_beside_the_message(owner, api, sanfrancisco):
    response = api(owner).post(reverse("api:stream-list"), {"path": NOWHERE}, format="json")
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "not_found"
    assert body["detail"] == "cluster nowhere does not exist: list clusters"
    assert body["hint"] == {"action": "cluster.list", "params": {}, "text": "list clusters"}
    assert "streamgate" not in response.content.decode()


def test_api_errors_without_a_hint_have_no_hint_field(owner, api, sanfrancisco):
    response = api(owner).post(reverse("api:stream-list"), {"path": "/mapr/sanfrancisco/x",
                                                            "ttl": -1}, format="json")
    assert response.status_code == 400
    assert "hint" not in response.json()


def test_pages_link_to_the_page_that_does_what_the_hint_says(owner, activity):
    err = NotFound("x is not a replica of y", hint=Hint(
        "replica.resume", "resume it", {"path": activity.path, "replica": "/mapr/ny/x"}))
    shown = refusal(err)
    url = reverse("stream-detail", args=[activity.pk]) + "#replicas"
    assert shown == (f'x is not a replica of y: resume it (<a href="{url}">Resume it on the '
                     "source stream</a>)")


def test_a_page_shows_the_link_beside_the_refused_field(owner, activity):
    response = signed_in(owner).post(f"/streams/{activity.pk}/replicas/add/",
                                     {"replica": "/mapr/newyork/nowhere"})
    page = response.content.decode()
    assert response.status_code == 400
    assert "streamgate stream create" not in page
    assert f'<a href="{reverse("streams")}#create-stream">Create a stream</a>' in page
