"""What an operator reads about a cluster's store group in every interface (`cluster info` on
the CLI and /rest, the cluster's page): the group as it is now (replication.services.clusters)
beside the copies alarm while one is open, so no interface words it differently."""

from __future__ import annotations

from operations.models import Alarm, AlarmKind
from replication.models import Cluster
from replication.services.clusters import cluster_info


def cluster_group(cluster: Cluster) -> dict:
    """cluster_info plus `alarm`: the open CLUSTER_ALARM_STORE_COPIES_SHORT's description, or
    null. The alarm is the evaluator's (raised and cleared each minute); `copiesOk` is now."""
    alarm = Alarm.objects.open().filter(kind=AlarmKind.COPIES_SHORT, cluster_id=cluster.pk) \
        .values_list("description", flat=True).first()
    return {**cluster_info(cluster), "alarm": alarm}
