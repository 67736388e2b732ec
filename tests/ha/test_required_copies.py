"""A cluster's required copies against its store's Patroni group: two are accepted where the
group has a primary and a synchronous standby, more than its members are refused, and
`cluster info`, the cluster's page and /metrics show each member's role and lag, and a standby
killed shows as down while its replication slot lives."""

from __future__ import annotations

import pytest

from replication import services
from replication.errors import InvalidInput
from replication.models import Cluster
from replication.services.clusters import cluster_info
from replication.stores import close_stores
from tests.portal.test_metrics import samples

pytestmark = pytest.mark.slow


def test_required_copies_accepted_up_to_the_group_and_shown(client, operator, ha_group):
    url = ha_group.url("store_copies")
    with pytest.raises(InvalidInput, match="has 3 member"):
        services.cluster_create(actor=operator, name="big", store_url=url, required_copies=4)
    assert not Cluster.objects.filter(name="big").exists()
    cluster = services.cluster_create(actor=operator, name="ha", store_url=url,
                                      required_copies=2)
    info = cluster_info(cluster)
    close_stores()
    assert (info["requiredcopies"], info["copies"], info["copiesOk"]) == (2, 2, True)
    roles = sorted(m["role"] for m in info["members"])
    assert roles == ["leader", "replica", "sync_standby"]
    primary = next(m for m in info["members"] if m["role"] == "leader")
    assert primary["name"].endswith(str(ha_group.ports.pg(int(ha_group.primary()[2:]))))
    patroni = {m["name"]: m["role"] for m in ha_group.patroni()["members"]}
    assert {m["name"]: m["role"] for m in info["members"] if m["role"] != "leader"} == {
        name: role for name, role in patroni.items() if role != "leader"}
    client.force_login(operator)
    page = client.get("/clusters/ha/").content.decode()
    assert '<dd data-field="copies">2 of 2 required</dd>' in page
    assert '<dd data-field="members">3</dd>' in page
    got = samples(client.get("/metrics").content.decode())
    close_stores()
    ha = (("cluster", "ha"),)
    assert (got[("streamgate_store_members", ha)], got[("streamgate_store_copies", ha)],
            got[("streamgate_store_required_copies", ha)]) == (3, 2, 2)
    assert sorted(dict(labels)["role"] for name, labels in got
                  if name == "streamgate_store_member_role" and ("cluster", "ha") in labels) \
        == ["leader", "replica", "sync_standby"]


def test_a_group_short_of_copies_raises_the_alarm_until_its_standbys_return(
        operator, ha_group):
    from operations.alarms import alarms_evaluate
    from operations.models import Alarm, AlarmKind

    services.cluster_create(actor=operator, name="short", store_url=ha_group.url("store_short"),
                            required_copies=2)
    alarms_evaluate()
    assert not Alarm.objects.open().filter(kind=AlarmKind.COPIES_SHORT).exists()
    standbys = [n for n in ha_group.names() if n.startswith("pg") and n != ha_group.primary()]
    for name in standbys:
        ha_group.kill(name)
    try:
        alarms_evaluate()
        (alarm,) = Alarm.objects.open().filter(kind=AlarmKind.COPIES_SHORT)
        assert "requires 2 copies" in alarm.description and "are on 1 now" in alarm.description
        # Patroni keeps a dead member's slot until its key expires (the TTL): shown as down.
        assert all(f"{name} replica down" in alarm.description for name in standbys), \
            alarm.description
    finally:
        for name in standbys:
            ha_group.start(name)
        ha_group.wait_healthy(120)
        close_stores()
    alarms_evaluate()
    assert not Alarm.objects.open().filter(kind=AlarmKind.COPIES_SHORT).exists()
