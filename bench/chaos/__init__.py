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
two `manage.py runreplicator` (splitting the links with leases), a Celery worker, a portal
(uvicorn) and a Kafka listener (`manage.py runkafka`), on a Redis of the run's own.

Producers: one per origin through the services in this process, one over REST through the
portal (API token), one through the command line (`streamgate produce`, a process per call, to
the same portal) and one idempotent librdkafka producer (enable.idempotence=true) through the
Kafka listener, the last three on newyork's topics. Every message carries an `id` header never
reused; a call that got no answer counts as not acknowledged and is not retried by the soak
(librdkafka retries its own batches, idempotently).

Faults, at random for `--seconds` (each kind at least once): kill -9 a gateway (restarted a
moment later), kill -9 one of the two replicators (the other takes its links), crash and
restart newyork's PostgreSQL, kill -9 Redis and start it empty (queued batches, presence,
leases and wake-ups lost), kill -9 the portal or the Kafka listener in the middle of produce
calls (restarted on the same port), pause a replica (resumed a moment later), hand a replica
link to the Spark catch-up job (the Celery worker runs it; skipped, printed "not built", while
`workers.spark` does not exist), and a failover/failback cycle: newyork takes over
sanfrancisco's topics with `replica failover -force` while producers write (sanfrancisco's
producer moves to newyork), then `replica failback` brings sanfrancisco back, keeping its
divergent tail in `<topic>.diverged` (bench/chaos/failover.py), and (on by default, off with
--no-moves) partition moves: every cluster gets a second store group at set-up, and random
partitions move to their cluster's other group, one or two at once (a pair of one topic, both
ways when it sits on both groups), each in a thread, throttled to last a few seconds while the
other faults go on, retried when a fault fails it. Origin partitions and replica ones (those a
gateway applies) alike: sanfrancisco's topics on newyork (the failover path) move first, as
newyork takes them over, and while the failback drains them back; each outcome (completed,
retried, left) and the stores' held flags are checked against the placement
(bench/chaos/moves.py). Then
everything is restored, the run waits until every replica's ends equal its origins' and the checker
(replication/engine/checker.py) reads every stream against its origins with the acknowledged
offsets, and sanfrancisco's topics and divergence topics with the acknowledged ids: lost,
duplicate, inconsistent, reordered and unreplicated messages must all be 0. Per fault kind the
table prints how many were injected and the time from the fault to replication moving again
(every replica topic advanced, or caught up): median and max, also as a table for
docs/benchmarks.md. Per producer, a second table gives what faults cost it (availability.py):
the messages sent and acknowledged, their share and the longest stretch with no
acknowledgement, against the goals (a share of 0.7, the longest fault window plus 10 s); a line
gives that verdict apart from the checker's, failing the run only with --availability-strict.

A watchdog (watchdog.py) gives every step a deadline: each fault's injection, undo and recovery,
each failover and failback, the soak's own phases (60 s unless the step says otherwise), and
the whole run one (--seconds + --converge-timeout + 900 s, or --deadline). Past one it prints
the step, the busy backends of the control and store databases with the pids blocking them, and
every thread's stack, kills what the run started and exits with a FAILED line: the soak always
ends by itself.

With `--ha` newyork's store and every process's Redis run on a replicated group of the run's
own (bench/hagroup: three PostgreSQL members under Patroni, three etcd, Redis with a replica and
three sentinels, ports from `--ha-base`), and the driver adds that group's faults
(bench/chaos/hafaults.py) in place of the whole-server PostgreSQL and Redis restarts: the store's
primary killed -9 with its data folder deleted, an etcd member killed -9, the Redis master
killed -9, and the primary SIGSTOPped past Patroni's leader lease, one at a time on a healthy
group.

`python -m bench.chaos [--seconds 180] [--seed N] [--no-spark] [--no-portal] [--no-kafka]
[--no-cli] [--no-failover] [--no-moves] [--ha] [--availability-strict] [--deadline S]` runs on
servers of its own: the control database `sgchaos_<pid>` sits on the second private PostgreSQL
(or on `--url`), Redis is a redis-server of the run's own (the shared one is never restarted);
everything it made is removed at the end, failure or not. The exit status is non-zero on any
anomaly (a move's held flags disagreeing with the placement too), a step past its deadline, and
with --availability-strict a missed availability goal.
tests/workers/test_chaos.py runs a short soak on the test database with the tests' fixtures
(the shared Redis, so no Redis restart there).
"""

from bench.chaos.command import Processes, main
from bench.chaos.options import Options
from bench.chaos.soak import (
    ANOMALIES,
    ENGINE_SETTINGS,
    FAILED,
    FAULT_KINDS,
    SOAK_SETTINGS,
    Result,
    check_all,
    run_soak,
)

__all__ = ["ANOMALIES", "ENGINE_SETTINGS", "FAILED", "FAULT_KINDS", "SOAK_SETTINGS", "Options",
           "Processes", "Result", "check_all", "main", "run_soak"]
