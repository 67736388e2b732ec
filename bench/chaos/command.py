"""`python -m bench.chaos`: the soak on servers and processes of its own (see the package)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.chaos.hafaults import GroupStore, HaFaults
from bench.chaos.options import Options
from bench.chaos.soak import ENGINE_SETTINGS, ROOT, Result, run_soak
from bench.chaos.sparkfaults import spark_built
from bench.chaos.watchdog import DEADLINE, Watchdog
from bench.hagroup import HaGroup
from bench.pgserver import PrivatePostgres
from bench.processes import stop_process
from bench.redisserver import PrivateRedis

# Room beyond the default 100: five gateways, the replicator, a Celery worker and this
# process's pools all connect to these servers (the control database too, without --url).
SERVER_SETTINGS = {"max_connections": "200"}
# The whole run's deadline beyond its faults and convergence: start-up (servers, migrations,
# the engine), the producers' last calls, the failback's drain, the checker.
MARGIN = 900.0


class Processes:
    """The engine's processes and a Celery worker, logging into a folder (Engine above)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.processes: dict[str, subprocess.Popen] = {}
        # The watchdog kills them all from its own thread while the main thread may be starting
        # one: a process started after that would outlive the run.
        self.lock = threading.Lock()
        self.closed = False

    def _start(self, label: str, *command: str) -> subprocess.Popen:
        with self.lock, (self.logs / f"{label}.log").open("ab") as log:
            if self.closed:
                raise RuntimeError(f"not starting {label}: the soak's processes were stopped")
            process = subprocess.Popen([sys.executable, *command], cwd=ROOT, env=self.env,
                                       stdout=log, stderr=subprocess.STDOUT)
            self.processes[label] = process
        return process

    def gateway(self, cluster: str, name: str) -> subprocess.Popen:
        return self._start(f"gw-{cluster}-{name}", "manage.py", "rungateway", "--cluster",
                           cluster, "--name", name, "--loglevel", "WARNING")

    def replicator(self, label: str = "replicator") -> subprocess.Popen:
        return self._start(label, "manage.py", "runreplicator")

    def portal(self, port: int, label: str = "portal") -> subprocess.Popen:
        """One uvicorn process, no supervisor: the soak kills -9 it and starts it again."""
        return self._start(label, "-m", "uvicorn", "portal.asgi:application", "--host",
                           "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level",
                           "warning")

    def kafka_listener(self, port: int, label: str = "kafka") -> subprocess.Popen:
        return self._start(label, "manage.py", "runkafka", "--listen", f"127.0.0.1:{port}")

    def celery_worker(self) -> subprocess.Popen:
        return self._start("celery", "-m", "celery", "-A", "workers.celery", "worker", "-Q",
                           self.env["CELERY_QUEUE"], "--pool", "solo", "--without-heartbeat",
                           "--without-gossip", "--without-mingle", "--loglevel", "WARNING")

    def celery_beat(self) -> subprocess.Popen:
        """Beat, as production runs it (its schedule in the control database): its resume-jobs
        entry enqueues again a job whose queued task a Redis restart lost."""
        return self._start("beat", "-m", "celery", "-A", "workers.celery", "beat",
                           "--loglevel", "WARNING")

    def stop(self, label: str, *, kill: bool = False) -> None:
        with self.lock:
            process = self.processes.pop(label, None)
        if process is not None:  # None: the watchdog stopped it already
            stop_process(process, kill=kill)

    def close(self) -> None:
        for label in list(self.processes):
            self.stop(label)

    def kill_all(self) -> None:
        """SIGKILL every process, reaped, and start none after (the watchdog's stop)."""
        with self.lock:
            self.closed = True
            running = list(self.processes.values())
            self.processes.clear()
        for process in running:
            stop_process(process, kill=True)


def command_env(url: str, name: str, redis_url: str) -> dict[str, str]:
    parts = urlsplit(url)
    tag = uuid.uuid4().hex[:10]
    return {
        **os.environ, **ENGINE_SETTINGS,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": urlunsplit(parts._replace(scheme="postgres", path=f"/{name}")),
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "REDIS_URL": redis_url,
        "STREAMGATE_DATA_DIR": str(ROOT / "var" / "chaos"),
        "STREAMGATE_NAMESPACE": f"sgchaos-{tag}:",
        "CELERY_QUEUE": f"sgchaos-{tag}",
        "LOG_LEVEL": "WARNING",
    }


def drop_databases(url: str, prefix: str) -> None:
    import psycopg
    from psycopg import sql

    admin = urlunsplit(urlsplit(url)._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        for (name,) in conn.execute("SELECT datname FROM pg_database WHERE "
                                    "starts_with(datname, %s)", [prefix]).fetchall():
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def forget_unacked(client: Any, prefix: str) -> None:
    """Kombu keeps the tasks a killed worker had taken in one `unacked` hash shared by every
    queue, and any worker on this Redis later puts them back on their queue: drop the ones for
    our queues, or they would recreate our keys after we removed them."""
    import json

    for tag, raw in client.hscan_iter("unacked"):
        with contextlib.suppress(ValueError, TypeError):
            if str(json.loads(raw)[2]).startswith(prefix):
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)


def spark_cluster_start() -> Any:
    """A standalone master and worker on loopback: the catch-ups' executors run in the
    worker's JVM, which the driver kills mid-job."""
    from workers.spark import standalone

    return standalone.start(cores=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=180.0, help="how long faults run")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--interval", type=float, default=0.05,
                        help="seconds between a producer's calls (2 producers, 100 records each)")
    parser.add_argument("--converge-timeout", type=float, default=300.0)
    parser.add_argument("--no-spark", action="store_true", help="no Spark catch-ups")
    parser.add_argument("--no-portal", action="store_true",
                        help="no producer through a portal process (nor its kills)")
    parser.add_argument("--no-kafka", action="store_true",
                        help="no idempotent producer through a Kafka listener (nor its kills)")
    parser.add_argument("--no-cli", action="store_true",
                        help="no producer through the command line (it goes through the portal)")
    parser.add_argument("--no-failover", action="store_true", help="no failover/failback cycle")
    parser.add_argument("--moves", action=argparse.BooleanOptionalAction, default=True,
                        help="every cluster on two store groups, origin and replica "
                             "partitions moved between them, two at once too, while producers "
                             "write (fault `move`, bench/chaos/moves.py; on "
                             "by default)")
    parser.add_argument("--kafka-timeout", type=float, default=60.0,
                        help="the Kafka producer's message.timeout.ms, in seconds: shorter "
                             "makes librdkafka time messages out (and bump its epoch) at each "
                             "listener kill")
    parser.add_argument("--availability-strict", action="store_true",
                        help="fail the run when an interface misses the availability goal")
    parser.add_argument("--deadline", type=float, default=0.0,
                        help="seconds after which the whole run is stopped and fails "
                             f"(default: --seconds + --converge-timeout + {MARGIN:.0f})")
    parser.add_argument("--ha", action="store_true",
                        help="newyork's store and every process's Redis on a replicated group "
                             "(bench/hagroup: Patroni, etcd, Sentinel), with its faults: the "
                             "primary killed with its disk or SIGSTOPped past the lease, an "
                             "etcd member and the Redis master killed (bench/chaos/hafaults.py)")
    parser.add_argument("--ha-base", type=int, default=27400,
                        help="the group's first port (--ha; 69 ports from it)")
    parser.add_argument("--url", default="",
                        help="a PostgreSQL server for the control database (default: the "
                             "private one that holds sanfrancisco's and tokyo's stores)")


class Run:
    """What `main` starts: the servers, the engine's processes, the Spark cluster, the logs;
    torn down at the end, or stopped at once by the watchdog."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.name = args, f"sgchaos_{os.getpid()}"
        self.logs = Path(tempfile.mkdtemp(prefix="sgchaos-logs-"))
        self.store, self.others = (PrivatePostgres(prefix="sgchaos-pg-",
                                                   settings=SERVER_SETTINGS) for _ in range(2))
        # A Redis of the run's own: the driver kills it, the shared one serves other sessions.
        self.redis = PrivateRedis()
        self.group: HaGroup | None = None
        if args.ha:  # newyork's store and Redis on a group instead (not under /tmp's 0700)
            root = Path(tempfile.mkdtemp(prefix="sgchaos-ha-"))
            root.chmod(0o755)
            self.group = HaGroup(root, args.ha_base)
        self.env: dict[str, str] = {}
        self.engine = Processes(self.env, self.logs)
        self.cluster: Any = None

    def start(self) -> None:
        import psycopg
        from psycopg import sql

        for server in (self.store, self.others) if self.group is None else (self.others,):
            server.launch()
        if self.group is None:
            self.redis.start()
        else:
            self.group.up()
        redis_url = self.redis.url if self.group is None else self.group.redis_url()
        # The control database on the second private server too, unless --url names one.
        url = self.args.url or self.others.url("postgres")
        self.env |= command_env(url, self.name, redis_url)
        admin = urlunsplit(urlsplit(url)._replace(scheme="postgresql", path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT,
                       env=self.env, check=True, timeout=300)
        os.environ.update(self.env)
        import django

        django.setup()
        # This process's own store pools and Redis clients warn on every fault injected; the
        # engine's processes log to files.
        logging.disable(logging.WARNING)
        if not self.args.no_spark and spark_built():
            self.cluster = spark_cluster_start()
            # The Celery worker submits to it; its drivers bind to loopback (session.py), so
            # they must name loopback to the executors too, not the host's address.
            self.env |= {"SPARK_MASTER_URL": self.cluster.master_url,
                         "SPARK_LOCAL_IP": "127.0.0.1"}
        self.engine.celery_worker()
        self.engine.celery_beat()

    def options(self, watchdog: Watchdog) -> Options:
        args = self.args
        options = Options(seconds=args.seconds, interval=args.interval,
                          converge_timeout=args.converge_timeout, spark=not args.no_spark,
                          portal=not args.no_portal, kafka=not args.no_kafka,
                          cli=not args.no_cli, failover=not args.no_failover, say=say,
                          moves=args.moves,
                          kafka_timeout=args.kafka_timeout, watchdog=watchdog)
        if args.seed is not None:
            options.seed = args.seed
        return options

    def stop_now(self) -> None:
        """The watchdog's stop: SIGKILL and reap every process, stop the servers (which ends
        any wait on them); nothing here waits on what a hang holds."""
        self.engine.kill_all()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.stop()
        self.remove_servers()
        # The main thread may have been restarting a server (the driver's undo) as this began:
        # one it started meanwhile goes too.
        time.sleep(2.0)
        self.remove_servers()
        print(f"logs kept in {self.logs}", flush=True)

    def remove_servers(self) -> None:
        """Each server whatever became of the others: one left running outlives the run."""
        removals: list[tuple[str, Callable[[], None]]] = [
            ("newyork's PostgreSQL", self.store.remove),
            ("the other PostgreSQL", self.others.remove), ("Redis", self.redis.remove)]
        if self.group is not None:
            removals.append(("the replicated group", self.group.remove))
        if self.args.url and self.env:
            removals.insert(0, ("the control database", lambda: drop_databases(
                self.args.url, self.name)))
        for what, remove in removals:
            try:
                remove()
            except Exception as error:
                print(f"removing {what} failed: {error!r}", flush=True)

    def teardown(self, ok: bool) -> None:
        self.engine.close()
        if self.cluster is not None:
            self.cluster.stop()
        with contextlib.suppress(Exception):
            from replication.stores import close_stores

            close_stores()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        self.remove_servers()
        if ok:
            shutil.rmtree(self.logs, ignore_errors=True)
        else:
            print(f"logs kept in {self.logs}")


def say(text: str) -> None:
    print(text, flush=True)


def main(args: argparse.Namespace) -> int:
    run = Run(args)
    # Ends the run by itself whatever hangs: os._exit, as the main thread may never return.
    watchdog = Watchdog(say=say, stop=run.stop_now, exit=os._exit).start()
    watchdog.arm("the whole soak (--deadline)", args.deadline or (
        args.seconds + args.converge_timeout + MARGIN))
    result: Result | None = None
    try:
        with watchdog.step("start the servers, migrate, start the Celery worker", 5 * DEADLINE):
            run.start()
        group = run.group
        result = run_soak(run.engine, run.store if group is None else GroupStore(group),
                          run.options(watchdog), run.others,
                          redis=run.redis if group is None else None, spark_cluster=run.cluster,
                          ha=None if group is None else HaFaults(group))
    finally:
        with watchdog.step("tear down", 3 * DEADLINE):
            run.teardown(result is not None and result.ok)
        watchdog.close()
    return report(result, strict=args.availability_strict)


def report(result: Result, *, strict: bool) -> int:
    """The tables and the verdicts: the checker's decides, the availability's with --strict."""
    print()
    print(result.table())
    for example in result.examples[:20]:
        print(f"  {example}")
    print()
    print(result.recovery_table())
    print()
    if result.mover is not None:
        print(result.mover.table())
        print()
    print(result.availability_table())
    print()
    available, line = result.availability_verdict()
    print(line + ("" if strict else " (not failing the run: --availability-strict would)"))
    verdict = "passed" if result.ok else "FAILED"
    print(f"CORRECTNESS: {verdict} ({sum(result.anomalies.values()) + result.misplaced} "
          "anomalies, "
          f"{'converged' if result.converge_seconds is not None else 'did not converge'})")
    return 0 if result.ok and (available or not strict) else 1
