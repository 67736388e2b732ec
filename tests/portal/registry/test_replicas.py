"""Schema ids follow a stream to its replicas: the registry is the tenant's, whatever the
cluster, so a replica of the same tenant resolves the same ids; a replica owned by another
tenant resolves the source tenant's ids by id once both halves of the agreement stand (its
messages carry them), and sees none of the source's subjects."""

from __future__ import annotations

import pytest

from replication.engine.store import Record
from replication.models import ReplicaLink, Upstream
from replication.services import topic_create
from replication.services.messages import messages_produce
from tests.clients import signed_in
from tests.factories import StreamFactory
from tests.portal.registry.helpers import USER_V2, Registry
from tests.portal.web.test_message_schemas import avro_bytes, framed

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(outsider, newyork):
    """mallory's stream in globex."""
    return StreamFactory(cluster=newyork, name="ledger", created_by=outsider,
                         tenant=outsider.memberships.get().tenant)


def agree(source, replica, *, upstream: bool = True) -> None:  # type: ignore[no-untyped-def]
    ReplicaLink.objects.create(source=source, replica=replica, idx=0)
    if upstream:
        Upstream.objects.create(replica=replica, source=source, idx=0)


def test_a_replica_in_another_tenant_resolves_the_sources_ids(owner, outsider, activity,
                                                              ledger):
    made = Registry(owner).register("users-value", USER_V2)[1]
    mallory = Registry(outsider)
    assert mallory.call("GET", f"schemas/ids/{made['id']}")[1]["error_code"] == 40403
    agree(activity, ledger, upstream=False)  # registered at the source only: moves no data
    assert mallory.call("GET", f"schemas/ids/{made['id']}")[1]["error_code"] == 40403
    Upstream.objects.create(replica=ledger, source=activity, idx=0)
    status, schema = mallory.call("GET", f"schemas/ids/{made['id']}")
    assert status == 200 and schema["guid"] == made["guid"]
    assert mallory.call("GET", f"schemas/ids/{made['id']}/subjects") == (200, [])
    assert mallory.call("GET", "subjects") == (200, [])
    assert mallory.call("GET", "subjects/users-value/versions")[1]["error_code"] == 40401
    # ...and not the other way round: the source does not read the replica tenant's.
    theirs = mallory.register("own-value", '"string"')[1]
    assert Registry(owner).call("GET", f"schemas/ids/{theirs['id']}")[0] == 404


def test_the_replica_tenants_browser_decodes_the_sources_messages(owner, outsider, activity,
                                                                  ledger):
    schema_id = Registry(owner).register("users-value", USER_V2)[1]["id"]
    agree(activity, ledger)
    topic_create(actor=outsider, stream=ledger, name="orders", partitions=1)
    messages_produce(actor=outsider, stream=ledger, topic="orders", records=[
        Record(framed(schema_id, avro_bytes({"name": "Ann Avro", "age": 7})), partition=0)])
    page = signed_in(outsider).get(f"/streams/{ledger.pk}/messages/",
                                   {"topic": "orders"}).content.decode()
    assert f"avro, schema id {schema_id}" in page and "&quot;age&quot;: 7" in page
