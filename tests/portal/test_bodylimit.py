"""Request bodies past STREAMGATE_MAX_BODY_BYTES (DATA_UPLOAD_MAX_MEMORY_SIZE) are refused with
413 before a view reads them, on the API (DRF's JSON parser reads the raw stream, past Django's
own check) and /rest alike; nothing is written."""

import base64

import pytest

from replication.services import topic_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clicks(owner, activity, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    return topic_create(actor=owner, stream=activity, name="clicks", partitions=1)


def produce(api, owner, stream, size: int):  # type: ignore[no-untyped-def]
    value = base64.b64encode(bytes(size)).decode()
    return api(owner).post(f"/api/v1/streams/{stream.uuid}/topics/clicks/messages/",
                           {"encoding": "base64", "records": [{"value": value}]}, format="json")


def stored(api, owner, stream) -> int:  # type: ignore[no-untyped-def]
    url = f"/api/v1/streams/{stream.uuid}/topics/clicks/messages/"
    return len(api(owner).get(url).json()["messages"])


def test_an_api_produce_over_the_body_limit_is_refused_with_413_and_writes_nothing(
        api, owner, activity, clicks):
    response = produce(api, owner, activity, 60 * 1024)  # 80 KiB in base64
    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
    assert "STREAMGATE_MAX_BODY_BYTES" in response.json()["detail"]
    assert stored(api, owner, activity) == 0


def test_an_api_produce_within_the_body_limit_is_stored(api, owner, activity, clicks):
    assert produce(api, owner, activity, 40 * 1024).status_code == 201
    assert stored(api, owner, activity) == 1


def test_a_rest_command_over_the_body_limit_is_refused_with_413(client, owner, clicks):
    client.force_login(owner)
    response = client.post("/rest/stream/topic/list", {"path": "/x", "pad": "p" * 70_000})
    assert response.status_code == 413
