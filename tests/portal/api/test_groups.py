"""/api/v1/streams/<uuid>/topics/<name>/offset-resets/: a consumer group's offsets reset,
a dry run by default (as kafka-consumer-groups'), applied with dry_run false, refused while
the group has live members and for another tenant; DRF errors on bad input."""

import pytest
from rest_framework.test import APIClient

from operations.models import AuditEvent
from replication.services.cursors import cursor_commit
from replication.stores import store_for
from tests.portal.web.test_groups import clicks, publish_group  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client


def url(stream) -> str:  # type: ignore[no-untyped-def]
    return f"/api/v1/streams/{stream.uuid}/topics/clicks/offset-resets/"


def cursors(stream) -> list[int | None]:  # type: ignore[no-untyped-def]
    store = store_for(stream.cluster)
    return [store.fetch_cursor(stream.uuid, "billing", "clicks", p) for p in (0, 1)]


def test_a_dry_run_answers_the_new_offsets_and_lag_and_changes_nothing(owner, activity,
                                                                      clicks):  # noqa: F811
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=2)
    response = api(owner).post(url(activity), {"group": "billing", "to": "latest"},
                               format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {"group": "billing", "topic": "clicks", "dry_run": True,
                               "partitions": [
                                   {"partition": 0, "current": 2, "new": 10, "high": 10,
                                    "lag": 0},
                                   {"partition": 1, "current": None, "new": 10, "high": 10,
                                    "lag": 0}]}
    assert cursors(activity) == [2, None]
    assert not AuditEvent.objects.filter(action="reset").exists()


def test_applied_it_moves_the_partitions_named_and_is_audited_as_the_api(owner, activity,
                                                                         clicks):  # noqa: F811
    response = api(owner).post(url(activity), {
        "group": "billing", "to": "offset", "offset": 4, "partitions": [1],
        "dry_run": False}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["partitions"] == [
        {"partition": 1, "current": None, "new": 4, "high": 10, "lag": 6}]
    assert cursors(activity) == [None, 4]
    assert AuditEvent.objects.get(action="reset").interface == "api"


def test_a_live_group_is_refused_with_409(owner, activity, clicks):  # noqa: F811
    publish_group(activity, activity.tenant_id, group="billing")
    response = api(owner).post(url(activity), {"group": "billing", "to": "earliest",
                                               "dry_run": False}, format="json")
    assert response.status_code == 409
    assert "3 live members" in response.json()["group"][0]
    assert cursors(activity) == [None, None]


@pytest.mark.parametrize(("body", "field"), [
    ({"group": "billing", "to": "yesterday"}, "to"),
    ({"group": "billing", "to": "offset", "offset": -1}, "offset"),
    ({"group": "billing", "to": "offset", "offset": 99, "dry_run": False}, "offset"),
    ({"group": "billing", "to": "timestamp", "dry_run": False}, "timestamp"),
    ({"group": "billing", "to": "earliest", "partitions": [5], "dry_run": False},
     "partitions"),
])
def test_bad_input_names_its_field_and_changes_nothing(owner, activity, clicks,  # noqa: F811
                                                       body, field):
    response = api(owner).post(url(activity), body, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert cursors(activity) == [None, None]


def test_needs_consumeperm_and_another_tenant_gets_404(member, outsider, activity,
                                                        clicks):  # noqa: F811
    body = {"group": "billing", "to": "earliest", "dry_run": False}
    assert api(member).post(url(activity), body, format="json").status_code == 403
    assert api(outsider).post(url(activity), body, format="json").status_code == 404
    assert cursors(activity) == [None, None]
