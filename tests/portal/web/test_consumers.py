"""The live-updates websocket (/ws/replication/) on the real ASGI application and the real
Redis channel layer: who may connect, and which tenant's events reach whom."""

import os

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.test import Client

from portal.asgi import application
from replication.services import replica_add, replica_pause
from tests.channel_events import use_redis_layer
from tests.factories import StreamFactory

ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.fixture(autouse=True)
def _private_channel_layer(settings):
    use_redis_layer(settings, f"sg-test-{os.getpid()}")


def socket_for(user=None, origin: tuple[bytes, bytes] = ORIGIN) -> WebsocketCommunicator:
    headers = [origin, (b"host", b"127.0.0.1")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/replication/", headers=headers)


def run(scenario):
    return async_to_sync(scenario)()


@pytest.mark.django_db
def test_anonymous_socket_is_refused():
    socket = socket_for(None)

    async def scenario():
        connected, _ = await socket.connect()
        assert not connected
        await socket.disconnect()

    run(scenario)


def test_socket_from_another_origin_is_refused(owner):
    socket = socket_for(owner, origin=(b"origin", b"http://evil.example"))

    async def scenario():
        connected, _ = await socket.connect()
        assert not connected
        await socket.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
def test_events_reach_the_tenant_after_commit_and_never_another_tenant(
    owner, outsider, activity, activity_ny
):
    alice, mallory = socket_for(owner), socket_for(outsider)

    async def scenario():
        assert (await alice.connect())[0] and (await mallory.connect())[0]
        await database_sync_to_async(replica_add)(actor=owner, source=activity,
                                                  replica=activity_ny)
        event = await alice.receive_json_from(timeout=2)
        assert event == {"event": "replica.added",
                         "payload": {"source": activity.pk, "replica": activity_ny.pk}}
        assert await mallory.receive_nothing(timeout=0.3)
        await alice.disconnect()
        await mallory.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_change_publishes_nothing(owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)

    def pause_then_roll_back() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            replica_pause(actor=owner, source=activity, replica=activity_ny)
            raise RuntimeError("roll back")

    alice = socket_for(owner)

    async def scenario():
        assert (await alice.connect())[0]
        await database_sync_to_async(pause_then_roll_back)()
        assert await alice.receive_nothing(timeout=0.3)
        await alice.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
def test_outsider_socket_gets_no_event_of_a_stream_it_cannot_see(outsider, owner, newyork):
    """mallory's own tenant gets its events; acme's never reach her socket."""
    mallorys = StreamFactory(cluster=newyork, name="ledger", created_by=outsider)
    other = StreamFactory(cluster=newyork, name="ledger2", created_by=outsider)

    mallory = socket_for(outsider)

    async def scenario():
        assert (await mallory.connect())[0]
        await database_sync_to_async(replica_add)(actor=outsider, source=mallorys,
                                                  replica=other)
        assert (await mallory.receive_json_from(timeout=2))["event"] == "replica.added"
        await mallory.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
def test_lag_samples_reach_both_ends_tenants_and_never_another(owner, outsider, activity,
                                                               activity_ny, settings):
    """The recorder publishes `replica.lag` (the replicator's event shape) for paused links,
    whose backlog the replicator does not watch."""
    from replication.engine.store import Record
    from replication.lag_history import lag_record
    from replication.services import upstream_add
    from replication.services.messages import messages_produce
    from replication.stores import store_for

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "lag-events"}}
    link = replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"abc") for _ in range(4)])
    # The pending bytes are the store's logical bytes: the values' 12 on a row store, the
    # batch's records section on a batch store.
    held = sum(p.bytes for p in store_for(activity.cluster).partition_stats(activity.uuid,
                                                                             "clicks"))
    assert held >= 12
    alice, mallory = socket_for(owner), socket_for(outsider)

    async def scenario():
        assert (await alice.connect())[0] and (await mallory.connect())[0]
        await database_sync_to_async(lag_record)(now_ms=123)
        event = await alice.receive_json_from(timeout=2)
        assert event == {"event": "replica.lag", "payload": {
            "link": link.pk, "source": activity.pk, "replica": activity_ny.pk, "t": 123,
            "messagesPending": 4, "bytesPending": held, "timeLagMs": event["payload"][
                "timeLagMs"], "stalled": False}}
        assert event["payload"]["timeLagMs"] >= 0
        assert await mallory.receive_nothing(timeout=0.3)
        await alice.disconnect()
        await mallory.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("frame", [{"text_data": "not json"}, {"bytes_data": b"\x00\xff"},
                                   {"text_data": "[1, 2]"}])
def test_a_frame_that_is_not_a_json_object_is_answered_and_the_socket_stays_open(
        owner, activity, activity_ny, caplog, frame):
    alice = socket_for(owner)

    async def scenario():
        assert (await alice.connect())[0]
        await alice.send_to(**frame)
        answer = await alice.receive_json_from(timeout=2)
        assert "JSON objects only" in answer["error"]
        await database_sync_to_async(replica_add)(actor=owner, source=activity,
                                                  replica=activity_ny)
        assert (await alice.receive_json_from(timeout=2))["event"] == "replica.added"
        await alice.disconnect()

    run(scenario)
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.exc_info]


def signed_in_socket(user) -> tuple[Client, WebsocketCommunicator]:  # type: ignore[no-untyped-def]
    """A browser session of `user` and a socket opened with its cookie."""
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return client, WebsocketCommunicator(application, "/ws/replication/", headers=[
        ORIGIN, (b"host", b"127.0.0.1"), (b"cookie", cookie)])


def end_sign_in(how: str, client: Client, user) -> None:  # type: ignore[no-untyped-def]
    if how == "signed_out":
        assert client.post("/logout/").status_code == 302
    elif how == "deactivated":
        user.is_active = False
        user.save()
    else:
        user.memberships.get().delete()


@pytest.mark.parametrize("how", ["signed_out", "deactivated", "membership_removed"])
@pytest.mark.django_db(transaction=True)
def test_a_socket_is_closed_when_its_sign_in_ends_and_gets_no_event_after(
        owner, carol, activity, activity_ny, how):
    """carol is in acme with alice: alice's changes reach her socket until her sign-in ends."""
    client, socket = signed_in_socket(carol)

    async def scenario():
        assert (await socket.connect())[0]
        await database_sync_to_async(end_sign_in)(how, client, carol)
        closed = await socket.receive_output(timeout=3)
        assert closed["type"] == "websocket.close" and closed["code"] == 4401
        await database_sync_to_async(replica_add)(actor=owner, source=activity,
                                                  replica=activity_ny)
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()

    run(scenario)


@pytest.mark.django_db(transaction=True)
def test_signing_out_one_session_leaves_the_users_other_sockets_open(owner, activity,
                                                                    activity_ny):
    left, leaving = signed_in_socket(owner)
    _, staying = signed_in_socket(owner)

    async def scenario():
        assert (await leaving.connect())[0] and (await staying.connect())[0]
        await database_sync_to_async(end_sign_in)("signed_out", left, owner)
        assert (await leaving.receive_output(timeout=3))["type"] == "websocket.close"
        await database_sync_to_async(replica_add)(actor=owner, source=activity,
                                                  replica=activity_ny)
        assert (await staying.receive_json_from(timeout=2))["event"] == "replica.added"
        await staying.disconnect()

    run(scenario)

