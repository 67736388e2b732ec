"""A cluster's required copies against its store's Patroni group: two are accepted where the
group has a primary and a synchronous standby, more than its members are refused, and
`cluster info` shows each member's role and lag."""

from __future__ import annotations

import pytest

from replication import services
from replication.errors import InvalidInput
from replication.models import Cluster
from replication.services.clusters import cluster_info
from replication.stores import close_stores

pytestmark = pytest.mark.slow


def test_required_copies_accepted_up_to_the_group_and_shown(operator, ha_group):
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
    assert roles == ["async_standby", "primary", "sync_standby"]
    primary = next(m for m in info["members"] if m["role"] == "primary")
    assert primary["name"].endswith(str(ha_group.ports.pg(int(ha_group.primary()[2:]))))


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
    finally:
        for name in standbys:
            ha_group.start(name)
        ha_group.wait_healthy(120)
        close_stores()
    alarms_evaluate()
    assert not Alarm.objects.open().filter(kind=AlarmKind.COPIES_SHORT).exists()
