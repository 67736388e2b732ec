import factory
from django.contrib.auth import get_user_model

from accounts.models import Membership, Role, Tenant
from replication import services
from replication.engine.store import Record
from replication.models import PERMISSIONS, Cluster, Gateway, Stream, Topic
from replication.services.messages import messages_produce
from workers.replication.applier import batch_serve


def numbered(prefix: str) -> factory.Sequence:
    """tenant0, tenant1, ...: a fresh name per row."""
    return factory.Sequence(lambda n: f"{prefix}{n}")


class NamedFactory(factory.django.DjangoModelFactory):
    """Rows named uniquely (tenants, clusters): asking for a name twice gives one row."""

    class Meta:
        abstract = True
        django_get_or_create = ("name",)


def named_factory(model: type, prefix: str) -> type[NamedFactory]:
    """The factory of a uniquely named model, its rows named prefix0, prefix1, ..."""
    return factory.make_factory(model, FACTORY_CLASS=NamedFactory, name=numbered(prefix))


TenantFactory = named_factory(Tenant, "tenant")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = numbered("user")
    password = factory.django.Password("correct horse battery staple")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.MEMBER


ClusterFactory = named_factory(Cluster, "cluster")


class GatewayFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gateway

    cluster = factory.SubFactory(ClusterFactory)
    name = numbered("gw")
    address = factory.LazyAttribute(lambda o: o.name)


class StreamFactory(factory.django.DjangoModelFactory):
    """A stream as `stream create` leaves it: every ACE is u:<creator>."""

    class Meta:
        model = Stream

    cluster = factory.SubFactory(ClusterFactory)
    name = numbered("stream")
    path = factory.LazyAttribute(lambda o: f"/mapr/{o.cluster.name}/{o.name}")
    created_by = factory.SubFactory(UserFactory)
    tenant = factory.LazyAttribute(lambda o: o.created_by.memberships.first().tenant)
    produceperm = factory.LazyAttribute(lambda o: f"u:{o.created_by.username}")
    consumeperm = factory.LazyAttribute(lambda o: f"u:{o.created_by.username}")
    topicperm = factory.LazyAttribute(lambda o: f"u:{o.created_by.username}")
    copyperm = factory.LazyAttribute(lambda o: f"u:{o.created_by.username}")
    adminperm = factory.LazyAttribute(lambda o: f"u:{o.created_by.username}")


class TopicFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Topic

    stream = factory.SubFactory(StreamFactory)
    name = numbered("topic")
    partitions = 1
    origin_uuid = factory.LazyAttribute(lambda o: o.stream.uuid)


def linked_pairs(owner, cluster, count: int) -> None:  # type: ignore[no-untyped-def]
    """`count` more source streams on `cluster` (s0, s1, ...), each registering a replica
    (d0, d1, ...) there: topology that pages must show without a query per row."""
    from replication.services import replica_add

    for i in range(count):
        source = StreamFactory(cluster=cluster, name=f"s{i}", created_by=owner)
        replica_add(actor=owner, source=source, replica=StreamFactory(
            cluster=cluster, name=f"d{i}", created_by=owner))


__all__ = ["PERMISSIONS"]


def spread(stream: Stream, topic: str, records: list[Record], start: int = 0) -> list[Record]:
    """The records given to the topic's partitions in turn, record `start` first (one produce
    call's keyless records would all go to one partition: store.STICKY_RUN)."""
    partitions = Topic.objects.get(stream=stream, name=topic).partitions
    for i, record in enumerate(records, start):
        record.partition = i % partitions
    return records


def replicated_clicks(owner, source, replica, *, per_partition: int,  # type: ignore[no-untyped-def]
                      value: bytes = b"%d"):
    """source -> replica agreed, with a 2-partition topic `clicks` of which `per_partition`
    messages a partition are produced (valued `value % i`) and replicated. Returns the link."""
    services.topic_create(actor=owner, stream=source, name="clicks", partitions=2)
    link = services.replica_add(actor=owner, source=source, replica=replica)
    services.upstream_add(actor=owner, replica=replica, source=source)
    messages_produce(actor=owner, stream=source, topic="clicks",
                     records=spread(source, "clicks",
                                    [Record(value=value % i) for i in range(2 * per_partition)]))
    for partition in (0, 1):
        batch_serve(link_id=link.pk, topic="clicks", partition=partition, start=0,
                    end=per_partition)
    return link
