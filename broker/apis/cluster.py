"""DescribeCluster (key 60): the live listeners as the cluster's brokers, as Metadata shows them.

A listener is a broker: there are no controllers to describe (endpoint type 2 is refused with
UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker refuses it) and no broker is ever fenced.
"""

from __future__ import annotations

from typing import Any

from broker import errors
from broker.apis.metadata import CLUSTER_ID, CLUSTER_OPERATIONS, NO_OPERATIONS
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.session import Session

BROKERS = 1


@handles(60, 0, 1)
async def describe_cluster(session: Session, header: RequestHeader, request: Any) -> Any:
    endpoint_type = getattr(request, "endpoint_type", BROKERS)
    if endpoint_type != BROKERS:
        raise KafkaError(errors.ErrorCode.unsupported_endpoint_type,
                         "a listener describes brokers only (endpoint type 1): there are no "
                         "controllers to describe")
    nodes = session.listener.live_nodes()
    operations = (CLUSTER_OPERATIONS if request.include_cluster_authorized_operations
                  else NO_OPERATIONS)
    return build(response_class(request), throttle_time=0, error_code=errors.NONE,
                 cluster_id=CLUSTER_ID, controller_id=nodes[0].node_id,
                 endpoint_type=BROKERS, cluster_authorized_operations=operations,
                 brokers=[{"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
                          for n in nodes])
