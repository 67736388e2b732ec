"""Well-formed requests of every API the listener advertises, in every version, with random
field values (hypothesis builds them from kio's schemas), sent by another tenant's user
against a running listener: it never crashes or fails unexpectedly, never writes into the
owner's stream, and never answers with the owner's data. Topic and group names are drawn
from the owner's real names as often as from random text."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.types import GroupId, TopicName, TransactionalId
from kio.static.primitive import Records

from broker.apis import MODULES  # noqa: F401  (registers every handler)
from broker.codec import encode
from broker.dispatch import BEFORE_AUTH, registry
from replication.engine.store import Record
from replication.models import PERMISSIONS, Stream, Topic
from replication.stores import store_for
from tests.broker.wire import Wire
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
SECRET = b"acme-secret-value-9f3c"
NAMES = ["/mapr/c1/apps:orders", "/mapr/c1/apps", "orders", "apps:orders", "__mapr_c1_apps_orders"]
REQUESTS = [(key, version) for key, found in sorted(registry.items()) if key not in BEFORE_AUTH
            for version in range(found.min_version, found.max_version + 1)]


def _names() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(NAMES), st.text(max_size=40))


def _request(api: tuple[int, int]) -> st.SearchStrategy[tuple[int, int, Any]]:
    key, version = api
    return st.from_type(load_request_schema(key, version)).map(lambda r: (key, version, r))


requests = st.sampled_from(REQUESTS).flatmap(_request)


def frame(key: int, version: int, request: Any) -> bytes:
    header_cls = HeaderV2 if request.__flexible__ else HeaderV1
    header = header_cls(request_api_key=key, request_api_version=version, correlation_id=7,
                        client_id="fuzz")
    payload = encode(header, request)
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture
def owned(kafka, owner):  # type: ignore[no-untyped-def]
    """acme's stream with one message holding SECRET, and an acme consumer group's cursor."""
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    store = store_for(stream.cluster)
    store.ensure_topic(stream.uuid, "orders", 2)
    store.append(stream.uuid, "orders", [Record(SECRET, key=SECRET)], origin=stream.uuid)
    return kafka, stream


def _state(stream) -> tuple:  # type: ignore[no-untyped-def]
    store = store_for(stream.cluster)
    return (sorted(Topic.objects.filter(stream=stream).values_list("name", "partitions")),
            store.watermarks(stream.uuid, "orders"),  # no message written or deleted
            Stream.objects.filter(pk=stream.pk).values_list(*PERMISSIONS).get())  # no ACL made


def _answer(wire: Wire) -> bytes:
    """The response frame, or b"" when none comes (acks=0, a long-polling fetch) or the
    listener closed the connection."""
    wire.sock.settimeout(1.0)
    try:
        return wire.read_frame()
    except (TimeoutError, ConnectionError, struct.error):
        return b""


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=requests)
def test_every_api_with_random_fields_never_crashes_writes_or_leaks_another_tenants_data(
        owned, outsider, sent):
    kafka, stream = owned
    before = _state(stream)
    theirs = kafka.as_user(outsider)
    wire = Wire(kafka.bootstrap)
    try:
        assert wire.authenticate(theirs.username, theirs.password).error_code == 0
        with contextlib.suppress(ConnectionError):
            wire.send_raw(frame(*sent))
        answered = _answer(wire)
    finally:
        wire.close()
    process, _ = kafka.listeners.processes["k1"]
    assert process.poll() is None, kafka.listeners.log()
    assert "connection_failed" not in kafka.listeners.log(), kafka.listeners.log()[-3000:]
    assert SECRET not in answered, sent
    assert _state(stream) == before, sent


@pytest.fixture(autouse=True, scope="module")
def _names_from_the_owners_stream():  # type: ignore[no-untyped-def]
    """Topic, group and transactional ids drawn from the owner's names half of the time;
    produce's record batches random bytes."""
    for kind in (TopicName, GroupId, TransactionalId):
        st.register_type_strategy(kind, _names())
    st.register_type_strategy(Records, st.binary(max_size=512))  # record batches as bytes
    yield
