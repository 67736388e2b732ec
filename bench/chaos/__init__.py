"""The chaos soak (issue 7): producers keep writing while a driver breaks the engine, then a
checker proves every stream equal to its origins.

Topology, set up through the services: clusters sanfrancisco, newyork and tokyo; two
multi-master streams /mapr/sanfrancisco/activity <-> /mapr/newyork/activity, each the origin
of two of the 4 topics (4 partitions each), and a secondary /mapr/tokyo/activity fed from
newyork (so sanfrancisco's topics reach it through a chain). newyork's message store lives on
a private PostgreSQL (initdb + pg_ctl on a port of its own) that the driver restarts; the
other two clusters' stores on a second private PostgreSQL, so the engine's connection pools
do not crowd the shared server (whose max_connections other sessions' suites also use).

Real processes: `manage.py rungateway` for sanfrancisco gw1/gw2, newyork gw1/gw2, tokyo gw1,
two `manage.py runreplicator` (splitting the links with leases) and a Celery worker, with Redis
keys and queues of the run's own.

Faults, at random for `--seconds`: kill -9 a gateway (restarted a moment later), kill -9 one of
the two replicators (the other takes its links; restarted a moment later), crash and
restart newyork's PostgreSQL, pause a replica (resumed a moment later), and hand a replica
link to the Spark catch-up job, as the replicator does with a large backlog (the Celery
worker runs it; skipped, printed "not built", while `workers.spark` does not exist). Then
everything is restored, the run waits until every replica's ends equal its origins' and the
checker (replication/engine/checker.py) reads every stream against its origins with the
acknowledged offsets: lost, duplicate, inconsistent, reordered and unreplicated messages must
all be 0. Per fault kind the table prints how many were injected and the time from the fault
to replication moving again (every replica topic advanced, or caught up): median and max.

`python -m bench.chaos [--seconds 180] [--seed N] [--no-spark]` runs on servers of its own:
the control database `sgchaos_<pid>` sits on the second private PostgreSQL (or on `--url`),
Redis keys and Celery queues under a namespace of the run's own; everything it made is removed
at the end, failure or not. The exit status is non-zero on any anomaly.
tests/workers/test_chaos.py runs a short soak on the test database with the tests' fixtures.
"""

from bench.chaos.command import Processes, main
from bench.chaos.soak import (
    ANOMALIES,
    ENGINE_SETTINGS,
    FAULT_KINDS,
    SOAK_SETTINGS,
    Options,
    Result,
    check_all,
    run_soak,
)

__all__ = ["ANOMALIES", "ENGINE_SETTINGS", "FAULT_KINDS", "SOAK_SETTINGS", "Options",
           "Processes", "Result", "check_all", "main", "run_soak"]
