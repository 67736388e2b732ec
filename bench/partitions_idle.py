"""Many partitions, idle (issue 33): the whole deployment's CPU with nothing produced, on
bench/partitions.py's scene (100,000 partitions over 10,000 topics in 1,000 streams by
default) with half of the streams replicated to cluster newyork.

The scene is bench/partitions.py's (`build`); then `replicate` gives the first REPLICATED
streams a replica each on newyork through the services (`stream_create -copymetafrom`,
`replica_connect`: both halves of the agreement, the topics propagated), configures the
gateways gw1 and gw2 (`cluster_gateway_set`), and makes every replica topic's rows in
newyork's store (its one store group: `ensure_topic`, as a gateway's first apply does), and
an hour of lag samples for each link (bench/pages.py `fill_history`: the recorder's rings
as an hour-old deployment has them) and each link marked verified now (the hourly
verification's first pass, due at once on fresh links, is a burst, not idle cost).

The deployment is started as compose.yaml and bin/run-production run it: the portal (uvicorn,
two workers), two replicators, the gateways gw1 and gw2 of newyork, a Kafka listener, a Celery
worker (its own queue) and Celery beat (the database scheduler). Once the engine is up and
SETTLE seconds have passed, each process's CPU time (its children included: uvicorn's and
Celery's workers) is read from /proc before and after SECONDS with nothing produced, beside
the transactions committed in the scene's databases (pg_stat_database.xact_commit), which
show whose polling costs PostgreSQL's CPU (the server is not counted: it is shared).

SGBENCH_CPROFILE=<label> runs that process under cProfile (written to var/bench/<label>.prof
when it stops).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.deployment import cpu_seconds, tree, wait_engine
from bench.pages import ROOT, Scene
from bench.partitions import add_scene_arguments, build
from bench.produce import _free_port

TARGET_PERCENT = 5.0
GATEWAYS = ("gw1", "gw2")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scene_arguments(parser)
    parser.add_argument("--replicated", type=int, default=None,
                        help="streams given a replica on newyork (default: half of them)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds after the engine is up before measuring")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured")


def replicate(*, count: int, topics: int, partitions: int) -> None:
    """Streams s0000.. s<count-1> get a replica on newyork, agreed both ways (inside Django,
    `manage.py shell -c`); the gateways configured; prints the timings as JSON."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from bench.pages import fill_history
    from replication.models import Cluster, ReplicaLink, Stream
    from replication.services import cluster_gateway_set, replica_connect, stream_create
    from replication.stores import store_for

    users = get_user_model()
    operator, alice = users.objects.get(username="ops"), users.objects.get(username="alice")
    started = time.perf_counter()
    cluster_gateway_set(actor=operator, dstcluster="newyork", gateways=" ".join(GATEWAYS))
    sources = Stream.objects.filter(cluster__name="sanfrancisco", name__lt=f"s{count:04d}")
    replicas, links = [], []
    for source in sources.order_by("name"):
        replica = stream_create(actor=alice, path=f"/mapr/newyork/{source.name}",
                                copymetafrom=source.path)
        links.append(replica_connect(actor=alice, source=source, replica=replica).pk)
        replicas.append(replica)
    # An hour of lag samples a link, as a deployment up for an hour has them: the recorder
    # reads and writes each ring whole every 5 s, so a fresh deployment's cost is not its own.
    fill_history(links, time.time())
    # Verified once, as an hour-old deployment's links are: the first pass over every link,
    # due at once on a fresh one, is an hourly job's burst, not idle cost.
    ReplicaLink.objects.filter(pk__in=links).update(last_verified=timezone.now())
    linked_s = time.perf_counter() - started
    started = time.perf_counter()
    # newyork has one store group, so no placement: its store's rows, as a gateway's first
    # apply makes them (the router's ensure_topic).
    store = store_for(Cluster.objects.get(name="newyork"))
    for replica in replicas:
        for j in range(topics):
            store.ensure_topic(replica.uuid, f"t{j:02d}", partitions)
    print(json.dumps({"replicas": len(replicas), "linked_s": linked_s,
                      "held_s": time.perf_counter() - started}))


def commands(env: dict[str, str]) -> dict[str, list[str]]:
    """The engine's processes by label, as compose.yaml runs them (the portal aside)."""
    return {
        "replicator-1": ["manage.py", "runreplicator"],
        "replicator-2": ["manage.py", "runreplicator"],
        **{f"gateway {name}": ["manage.py", "rungateway", "--cluster", "newyork", "--name", name]
           for name in GATEWAYS},
        "kafka listener": ["manage.py", "runkafka", "--listen", f"127.0.0.1:{_free_port()}"],
        "celery worker": ["-m", "celery", "-A", "workers.celery", "worker", "-Q",
                          env["CELERY_QUEUE"]],
        "celery beat": ["-m", "celery", "-A", "workers.celery", "beat", "--scheduler",
                        "django_celery_beat.schedulers:DatabaseScheduler"],
    }


def _profiled(label: str, command: list[str]) -> list[str]:
    if os.environ.get("SGBENCH_CPROFILE") != label:
        return command
    out = ROOT / "var" / "bench" / f"{label.replace(' ', '-')}.prof"
    return ["-m", "cProfile", "-o", str(out), *command]


def commits(scene: Scene) -> dict[str, int]:
    """Transactions committed so far in each of the scene's databases."""
    import psycopg

    with psycopg.connect(scene.server, autocommit=True) as conn:
        return dict(conn.execute(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE starts_with(datname, %s)",
            [scene.name]).fetchall())


def measure(scene: Scene, labels: dict[str, int], seconds: float) -> dict:
    """CPU seconds of each process tree and commits per database over `seconds`."""
    pids = {label: tree(pid) for label, pid in labels.items()}
    before = {label: sum(cpu_seconds(p) for p in group) for label, group in pids.items()}
    before_commits, load_before = commits(scene), os.getloadavg()[0]
    wall = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - wall
    used = {label: sum(cpu_seconds(p) for p in group) - before[label]
            for label, group in pids.items()}
    rates = {name.removeprefix(scene.name) or "control": (n - before_commits.get(name, 0)) / wall
             for name, n in commits(scene).items()}
    return {"wall": wall, "used": used, "commits": rates,
            "load": (load_before, os.getloadavg()[0])}


def start(scene: Scene) -> dict[str, int]:
    """The portal and the engine, up; each process's pid by label."""
    scene.start(*(_profiled(label, command) for label, command in commands(scene.env).items()))
    wait_engine(scene.env, scene.namespace, GATEWAYS, logs=scene.log.parent)
    names = ["portal (uvicorn, 2 workers)", *commands(scene.env)]
    for process in scene.processes:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited ({process.returncode}): see "
                               f"{scene.log.parent}")
    return {name: process.pid for name, process in zip(names, scene.processes, strict=True)}


def main(args: argparse.Namespace) -> int:
    replicated = args.streams // 2 if args.replicated is None else args.replicated
    scene = Scene(args.url, "uvicorn", "idle")
    scene.env["CELERY_QUEUE"] = f"{scene.namespace}celery"
    scene.env["LOG_LEVEL"] = "WARNING"
    try:
        _, seed_s = build(scene, args)
        started = time.perf_counter()
        out = scene.manage("shell", "-c", "from bench.partitions_idle import replicate; "
                           f"replicate(count={replicated}, topics={args.topics_per_stream}, "
                           f"partitions={args.partitions_per_topic})")
        print(f"replicas ready in {time.perf_counter() - started:.0f} s "
              f"({out.strip().splitlines()[-1]})", flush=True)
        labels = start(scene)
        time.sleep(args.settle)
        idle = measure(scene, labels, args.seconds)
    finally:
        scene.stop()
        _forget_queue(scene)
    print()
    print(report(args, replicated, seed_s, idle))
    return 0 if 100 * sum(idle["used"].values()) / idle["wall"] < TARGET_PERCENT else 1


def _forget_queue(scene: Scene) -> None:
    """The scene's Celery queue and its bindings (keys named by the queue, not the namespace)."""
    import redis

    client = redis.Redis.from_url(scene.env["REDIS_URL"])
    keys = [*client.scan_iter(f"{scene.env['CELERY_QUEUE']}*"),
            *client.scan_iter(f"_kombu.binding.{scene.env['CELERY_QUEUE']}*")]
    if keys:
        client.delete(*keys)


def report(args: argparse.Namespace, replicated: int, seed_s: float, idle: dict) -> str:
    used, wall = idle["used"], idle["wall"]
    total = sum(used.values())
    topics = args.streams * args.topics_per_stream
    lines = [
        f"{args.streams:,} streams x {args.topics_per_stream} topics x "
        f"{args.partitions_per_topic} partitions = {topics * args.partitions_per_topic:,} "
        f"partitions over {topics:,} topics (3 store groups), {replicated:,} streams replicated "
        f"to newyork; seeding {seed_s:.0f} s; settled {args.settle:.0f} s, then nothing "
        f"produced for {wall:.0f} s; load average {idle['load'][0]:.1f} -> "
        f"{idle['load'][1]:.1f}", "",
        "| process | CPU s | % of one core |", "| --- | ---: | ---: |",
        *(f"| {label} | {v:.2f} | {100 * v / wall:.2f} % |" for label, v in used.items()),
        f"| total (target < {TARGET_PERCENT:.0f} %) | {total:.2f} | {100 * total / wall:.2f} % "
        f"|", "",
        "Transactions committed per second, by database: " + ", ".join(
            f"{name} {rate:.1f}" for name, rate in sorted(idle["commits"].items()))]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.partitions_idle")
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
