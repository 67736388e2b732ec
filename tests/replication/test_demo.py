import pytest

from replication.demo import KAFKA_STREAM, REPLICA, SOURCE, TOPIC, _clicks, demo_scene_create
from replication.models import Cluster, DefaultStream, ReplicaLink, ReplicaState, Stream
from replication.services.messages import messages_produce


@pytest.mark.django_db(transaction=True)
def test_demo_scene_on_a_fresh_database_replicates_activity(operator):
    from tests.factories import MembershipFactory

    MembershipFactory(user=operator, tenant__name="default")
    assert demo_scene_create(actor=operator) is True
    assert sorted(Cluster.objects.values_list("name", flat=True)) == ["newyork", "sanfrancisco"]
    assert sorted(Cluster.objects.get(name="newyork").gateways.values_list("name", flat=True)) == [
        "gw1", "gw2"]
    link = ReplicaLink.objects.get(source__path=SOURCE, replica__path=REPLICA)
    assert link.replica_state() == ReplicaState.REPLICATING and not link.paused
    source = Stream.objects.get(path=SOURCE)
    placed = messages_produce(actor=operator, stream=source, topic=TOPIC, records=_clicks(5))
    assert len(placed) == 5
    # Plain Kafka names of the demo tenant live in a default stream, created on first use.
    assert DefaultStream.objects.get(tenant__name="default", cluster__name="sanfrancisco",
                                     user=None).path == KAFKA_STREAM
    assert demo_scene_create(actor=operator) is False  # never twice, never on a used database
    assert Stream.objects.count() == 2
