"""CreateAcls, DescribeAcls and DeleteAcls with confluent-kafka's and kafka-python's
AdminClients: Kafka's ACLs are a view of the streams' ACEs (broker/apis/acls.py), changed
through the stream's permissions."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from accounts.models import Role
from operations.models import AuditEvent
from replication.models import Stream
from tests.broker.apis.test_records_admin import apps  # noqa: F401 (fixture)
from tests.factories import MembershipFactory

pytestmark = pytest.mark.slow
PREFIX = "/mapr/c1/apps:"
ALLOW, TOPIC, PREFIXED = AclPermissionType.ALLOW, ResourceType.TOPIC, ResourcePatternType.PREFIXED
EVERY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)


def grant(principal: str, operation: AclOperation, *, name: str = PREFIX,
          pattern: ResourcePatternType = PREFIXED, resource: ResourceType = TOPIC,
          permission: AclPermissionType = ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, operation, permission)


def created(admin: AdminClient, *bindings: AclBinding) -> list[object]:
    """None for each binding created, else the Kafka error it was refused with."""
    out: list[object] = []
    for future in admin.create_acls(list(bindings)).values():
        try:
            future.result(timeout=30)
            out.append(None)
        except KafkaException as error:
            out.append(error.args[0])
    return out


def described(admin: AdminClient, wanted: AclBindingFilter = EVERY) -> set[tuple]:
    return {(b.name, b.principal, b.operation.name)
            for b in admin.describe_acls(wanted).result(timeout=30)}


def aces(stream: Stream) -> dict[str, str]:
    fresh = Stream.objects.get(pk=stream.pk)
    return {perm: getattr(fresh, perm) for perm in ("produceperm", "consumeperm", "topicperm",
                                                    "adminperm", "copyperm")}


def test_acls_are_the_streams_aces_created_described_and_deleted(kafka, apps):  # noqa: F811
    admin = AdminClient(kafka.confluent())
    assert described(admin) == {(PREFIX, "User:alice", op) for op in (
        "WRITE", "READ", "CREATE", "DELETE", "ALTER", "ALTER_CONFIGS")}
    assert created(admin, grant("User:bob", AclOperation.WRITE),
                   grant("Group:ops", AclOperation.READ),
                   grant("User:*", AclOperation.CREATE)) == [None, None, None]
    assert aces(apps) == {"produceperm": "u:alice | u:bob", "consumeperm": "u:alice | g:ops",
                          "topicperm": "p", "adminperm": "u:alice", "copyperm": "u:alice"}
    # Each grant is audited as the stream edit it is.
    assert AuditEvent.objects.filter(action="edit").count() == 3
    only_bob = AclBindingFilter(TOPIC, PREFIX, PREFIXED, "User:bob", None, AclOperation.ANY,
                                AclPermissionType.ANY)
    assert described(admin, only_bob) == {(PREFIX, "User:bob", "WRITE")}
    # MATCH finds the stream's prefixed ACLs from one of its topics' names.
    matching = AclBindingFilter(TOPIC, f"{PREFIX}orders", ResourcePatternType.MATCH, None, None,
                                AclOperation.READ, AclPermissionType.ANY)
    assert described(admin, matching) == {(PREFIX, "User:alice", "READ"),
                                          (PREFIX, "Group:ops", "READ")}
    # Deleting CREATE takes topicperm away whole, and DELETE with it: both are listed.
    public = AclBindingFilter(TOPIC, PREFIX, PREFIXED, "User:*", None, AclOperation.CREATE,
                              AclPermissionType.ALLOW)
    gone = admin.delete_acls([only_bob, public])
    results = [sorted((b.principal, b.operation.name) for b in f.result(timeout=30))
               for f in gone.values()]
    assert results == [[("User:bob", "WRITE")], [("User:*", "CREATE"), ("User:*", "DELETE")]]
    assert aces(apps) == {"produceperm": "u:alice", "consumeperm": "u:alice | g:ops",
                          "topicperm": '""', "adminperm": "u:alice", "copyperm": "u:alice"}


def test_acls_the_aces_cannot_hold_are_refused_and_change_nothing(kafka, apps):  # noqa: F811
    admin = AdminClient(kafka.confluent())
    before = aces(apps)
    refusals = created(
        admin,
        grant("User:bob", AclOperation.WRITE, name=f"{PREFIX}orders",
              pattern=ResourcePatternType.LITERAL),  # per topic
        grant("User:bob", AclOperation.WRITE, permission=AclPermissionType.DENY),
        grant("User:bob", AclOperation.READ, resource=ResourceType.GROUP, name="g1",
              pattern=ResourcePatternType.LITERAL),
        grant("User:bob", AclOperation.WRITE, host="10.0.0.1"),
        grant("User:bob", AclOperation.DESCRIBE),
        grant("Service:bob", AclOperation.WRITE),
        grant("User:bob", AclOperation.WRITE, name="/mapr/c1/nosuch:"),
    )
    codes = [error.code() for error in refusals]  # type: ignore[union-attr]
    assert codes[:6] == [KafkaError.INVALID_REQUEST] * 6
    assert codes[6] == KafkaError.UNKNOWN_TOPIC_OR_PART
    texts = [error.str() for error in refusals]  # type: ignore[union-attr]
    assert "PREFIXED pattern" in texts[0] and "'<stream path>:'" in texts[0]
    assert "only ALLOW" in texts[1] and "leaving a principal out" in texts[1]
    assert "give '*'" in texts[3] and "any of them lets a client DESCRIBE" in texts[4]
    assert aces(apps) == before


def test_another_tenant_and_a_member_without_adminperm_change_no_ace(kafka, apps,  # noqa: F811
                                                                      outsider):
    carol = MembershipFactory(user__username="carol", tenant=apps.tenant, role=Role.MEMBER).user
    before = aces(apps)
    mallory = AdminClient(kafka.as_user(outsider).confluent())
    (refusal,) = created(mallory, grant("User:mallory", AclOperation.ALL))
    assert refusal.code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # type: ignore[union-attr]
    assert described(mallory) == set()  # another tenant's streams read as none
    assert [f.result(timeout=30) for f in mallory.delete_acls([EVERY]).values()] == [[]]
    admin = AdminClient(kafka.as_user(carol).confluent())
    (refusal,) = created(admin, grant("User:carol", AclOperation.ALL))
    assert refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # type: ignore[union-attr]
    assert "adminperm" in refusal.str()  # type: ignore[union-attr]
    assert (PREFIX, "User:alice", "WRITE") in described(admin)  # the tenant's members see them
    with pytest.raises(KafkaException) as refused:
        next(iter(admin.delete_acls([EVERY]).values())).result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert aces(apps) == before


def test_kafka_python_creates_describes_and_deletes_the_same_aces(kafka, apps):  # noqa: F811
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as PyResourceType
    from kafka.errors import InvalidRequestError

    stream = ResourcePattern(PyResourceType.TOPIC, PREFIX, ACLResourcePatternType.PREFIXED)
    bob = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, stream)
    literal = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, ResourcePattern(
        PyResourceType.TOPIC, f"{PREFIX}orders", ACLResourcePatternType.LITERAL))
    only_bob = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                         ResourcePatternFilter(PyResourceType.TOPIC, PREFIX,
                                               ACLResourcePatternType.PREFIXED))
    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        result = admin.create_acls([bob, literal])
        assert len(result["succeeded"]) == 1 and len(result["failed"]) == 1
        assert result["failed"][0][1] is InvalidRequestError  # per topic: ACEs are per stream
        assert aces(apps)["produceperm"] == "u:alice | u:bob"
        found, _ = admin.describe_acls(only_bob)
        assert [(a.principal, a.operation) for a in found] == [("User:bob", ACLOperation.WRITE)]
        [(_, deleted, _)] = admin.delete_acls([only_bob])
        assert [(a.principal, a.operation) for a, _ in deleted] == [("User:bob",
                                                                     ACLOperation.WRITE)]
    finally:
        admin.close()
    assert aces(apps)["produceperm"] == "u:alice"
