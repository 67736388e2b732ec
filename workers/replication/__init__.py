"""Replication's moving parts, each a small object with its own fields, composed rather than
mixed in. The source side: the loop (loop.py, `Replicator`), which plans from the replica
partitions' ends and keeps no progress of its own; its Dispatcher (dispatcher.py), holding the
flights (flights.py), the gateway choice (gatewaychoice.py) and the throttles (throttle.py);
its link cache and sweep marks (linkcache.py), lag events (lagevents.py), consumer cursors
(cursors.py) and link leases (leases.py). The destination side: a gateway process
(gateway.py) heartbeating and consuming its batch list (consumer.py), the applier
(applier.py), and the watch of which gateways are live (watch.py). They signal each other
through replication/transport/.
"""
