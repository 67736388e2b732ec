"""Many partitions (issue 33): a cluster of 3 store groups holding STREAMS x TOPICS x
PARTITIONS partitions (100,000 over 10,000 topics in 1,000 streams by default).

A scratch control database (bench/pages.py's Scene) gets one tenant, clusters sanfrancisco and
newyork, and 3 store groups on sanfrancisco (3 scratch databases on the same PostgreSQL
server, `store_group_add`). The streams and topics are written in bulk with the ORM; the
partitions are placed through the real placement path in bulk: the groups' loads are read
once (placement.loads_of), each topic's partitions go to placement.least_loaded of the loads
as they grow, the Placement rows are written in one bulk insert and the version bumped once,
then every topic's rows are made held in every group's store (placement.hold: ensure_topic and
the fence), as the router's ensure_topic does one topic at a time.

Measured, with a Kafka listener (`manage.py runkafka`) on the scene:
1. Metadata for all topics, N times, p50/p99: answered (a bare Metadata v1 request on a
   signed-in connection, timed to the last byte of the answer), and in the client (a librdkafka
   AdminClient's list_topics(), which also builds 100,000 partition objects in Python);
2. topic create: K topics through CreateTopics (AdminClient.create_topics) and K through the
   service (`topic_create`, then the router's first ensure_topic): p50/p95;
3. placement spread: partitions per group, max/min;
4. the portal's main pages (served as compose.yaml serves them, bench/pages.py's Scene and
   timing: the server's own `duration_ms`), p50/p95.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.kafka import Listener, _kafka_config
from bench.pages import PASSWORD, Scene, _percentile, measure
from bench.sasl import Connection

METADATA_TARGET_MS = 200.0
CREATE_TARGET_MS = 100.0
SPREAD_TARGET = 1.10
PAGE_TARGET_MS = 300.0
GROUPS = ("g1", "g2", "g3")


def add_scene_arguments(parser: argparse.ArgumentParser) -> None:
    """The scene's size and server (this module's and bench/partitions_idle.py's)."""
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--topics-per-stream", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=10)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server (the benchmark creates its own databases)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scene_arguments(parser)
    parser.add_argument("--requests", type=int, default=50, help="Metadata requests")
    parser.add_argument("--creates", type=int, default=50, help="topics created per way")
    parser.add_argument("--pages", type=int, default=50,
                        help="timed requests per portal page (0: no pages)")


def seed(*, streams: int, topics: int, partitions: int, groups_base: str) -> None:
    """The scene, inside Django (`manage.py shell -c`); prints the token and timings as JSON."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from accounts.models import Membership, Role, Tenant
    from replication.models import Stream, Topic
    from replication.services import cluster_create
    from replication.services.storegroups import store_group_add

    timings = {}
    started = time.perf_counter()
    users = get_user_model()
    operator = users.objects.create_user("ops", password="bench", is_staff=True)
    alice = users.objects.create_user("alice", password=PASSWORD)
    tenant = Tenant.objects.get_or_create(name="bench")[0]
    Membership.objects.create(user=alice, tenant=tenant, role=Role.MEMBER)
    sf, _ = (cluster_create(actor=operator, name=n) for n in ("sanfrancisco", "newyork"))
    for name in GROUPS[1:]:  # the home group is the cluster's own store
        store_group_add(actor=operator, cluster="sanfrancisco", name=name,
                        url=f"{groups_base}_{name}")
    aces = dict.fromkeys(("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"),
                         "u:alice | u:bench")
    made = Stream.objects.bulk_create(
        (Stream(path=f"/mapr/sanfrancisco/s{i:04d}", cluster=sf, name=f"s{i:04d}",
                tenant=tenant, created_by=alice, **aces) for i in range(streams)),
        batch_size=2000)
    Topic.objects.bulk_create(
        (Topic(stream=s, name=f"t{j:02d}", partitions=partitions, origin_uuid=s.uuid)
         for s in made for j in range(topics)), batch_size=5000)
    timings["rows_s"] = time.perf_counter() - started

    started = time.perf_counter()
    view = place_in_bulk(sf, made, [f"t{j:02d}" for j in range(topics)], partitions)
    timings["placed_s"] = time.perf_counter() - started
    started = time.perf_counter()
    hold_all(view, made, [f"t{j:02d}" for j in range(topics)])
    timings["held_s"] = time.perf_counter() - started
    from io import StringIO

    out = StringIO()
    call_command("createtenantuser", "--tenant", "bench", "--username", "bench", "--operator",
                 stdout=out)
    print(json.dumps({"token": out.getvalue().strip().splitlines()[-1], "stream": made[0].pk,
                      **timings}))


def place_in_bulk(cluster, streams: list, names: list[str], partitions: int):  # type: ignore[no-untyped-def]
    """Every partition of `names` in each of `streams` placed as the router's placement path
    places them one topic at a time (placement.least_loaded over the groups' loads as they
    grow), in one bulk insert and one version bump; the cluster's fresh view."""
    from replication import placement
    from replication.models import Placement, StoreGroup
    from replication.stores import store_for

    store_for(cluster)  # the router, and its placement hooks
    view = placement.refresh(cluster.name, None, force=True)
    loads = placement.loads_of(view, view.active)
    counts = {g: loads[g].partitions for g in loads}
    group_pk = dict(StoreGroup.objects.filter(cluster=cluster).values_list("name", "pk"))
    rows = []
    for s in streams:
        for name in names:
            now = {g: placement.Load(loads[g].nbytes, counts[g], loads[g].rate) for g in loads}
            for p, g in enumerate(placement.least_loaded(now, partitions)):
                counts[g] += 1
                rows.append(Placement(stream_id=s.pk, topic=name, partition=p,
                                      group_id=group_pk[g]))
    Placement.objects.bulk_create(rows, batch_size=10000)
    placement.bump(cluster.name)
    return placement.refresh(cluster.name, view, force=True)


def hold_all(view, streams: list, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Each topic's rows made in every group's store, held where placed (placement.hold)."""
    from replication import placement

    for s in streams:
        for name in names:
            placement.hold(view, s.uuid, name)


def spread() -> None:
    """Partitions per group of sanfrancisco, as JSON."""
    from django.db.models import Count

    from replication.models import Placement

    print(json.dumps(dict(Placement.objects.filter(group__cluster__name="sanfrancisco")
                          .values_list("group__name").annotate(n=Count("pk"))
                          .values_list("group__name", "n"))))


def service_creates(count: int, partitions: int) -> None:
    """`count` topics through topic_create then the router's first ensure_topic: ms each."""
    from django.contrib.auth import get_user_model

    from replication.models import Stream
    from replication.services import topic_create
    from replication.stores import store_for

    alice = get_user_model().objects.get(username="alice")
    stream = Stream.objects.get(path="/mapr/sanfrancisco/s0000")
    store = store_for(stream.cluster)
    times = []
    for i in range(count):
        started = time.perf_counter()
        topic_create(actor=alice, stream=stream, name=f"svc{i:03d}", partitions=partitions)
        store.ensure_topic(stream.uuid, f"svc{i:03d}", partitions)
        times.append((time.perf_counter() - started) * 1000)
    print(json.dumps(times))


def _metadata(config: dict, count: int, expect: int) -> list[float]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(config)
    first = admin.list_topics(timeout=120)
    if len(first.topics) < expect:
        raise RuntimeError(f"Metadata named {len(first.topics)} topics, not {expect}")
    times = []
    for _ in range(count):
        started = time.perf_counter()
        admin.list_topics(timeout=120)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _wire_metadata(port: int, token: str, count: int) -> list[float]:
    """Metadata v1 for every topic on one signed-in connection (bench/sasl.py's client): from
    the request sent to the whole answer read, the listener's time with no client library
    turning 100,000 partitions into objects."""
    connection = Connection(port)
    try:
        connection.sign_in("PLAIN", token)
        connection.metadata()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            connection.metadata()
            times.append((time.perf_counter() - started) * 1000)
        return times
    finally:
        connection.close()


def _kafka_creates(config: dict, count: int, partitions: int) -> list[float]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    times = []
    for i in range(count):
        started = time.perf_counter()
        futures = admin.create_topics(
            [NewTopic(f"/mapr/sanfrancisco/s0001:kc{i:03d}", partitions)], operation_timeout=30)
        for future in futures.values():
            future.result()
        times.append((time.perf_counter() - started) * 1000)
    return times


def build(scene: Scene, args: argparse.Namespace) -> tuple[dict, float]:
    """The scene's database, migrated and seeded (`seed`): its JSON and the seconds taken."""
    import psycopg
    from psycopg import sql

    started = time.perf_counter()
    with psycopg.connect(scene.server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(scene.name)))
    scene.manage("migrate", "--no-input", "-v0")
    base = scene.env["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    out = scene.manage("shell", "-c", f"from bench.partitions import seed; seed(streams="
                       f"{args.streams}, topics={args.topics_per_stream}, partitions="
                       f"{args.partitions_per_topic}, groups_base={base!r})")
    seeded = json.loads(out.strip().splitlines()[-1])
    seed_s = time.perf_counter() - started
    steps = {k: round(v, 1) for k, v in seeded.items() if k != "token"}
    print(f"scene ready in {seed_s:.0f} s ({json.dumps(steps)})", flush=True)
    return seeded, seed_s


def main(args: argparse.Namespace) -> int:
    scene = Scene(args.url, "uvicorn", "many")
    topics = args.streams * args.topics_per_stream
    partitions = topics * args.partitions_per_topic
    listener = None
    try:
        seeded, seed_s = build(scene, args)
        listener = Listener(scene.env)
        config = _kafka_config(f"127.0.0.1:{listener.port}", seeded["token"])
        cpu = listener.cpu_seconds()
        meta = _metadata(config, args.requests, topics)
        # The listener's share of list_topics' time (the rest is the client's parsing).
        listener_ms = (listener.cpu_seconds() - cpu) * 1000 / (args.requests + 1)
        wire = _wire_metadata(listener.port, seeded["token"], args.requests)
        kafka_creates = _kafka_creates(config, args.creates, args.partitions_per_topic)
        svc = json.loads(scene.manage("shell", "-c", "from bench.partitions import "
                                      f"service_creates; service_creates({args.creates}, "
                                      f"{args.partitions_per_topic})").strip().splitlines()[-1])
        per_group = json.loads(scene.manage("shell", "-c", "from bench.partitions import spread;"
                                            " spread()").strip().splitlines()[-1])
        pages = _pages(scene, seeded["stream"], args.pages) if args.pages else []
    finally:
        if listener is not None:
            listener.stop()
        scene.stop()
    ratio = max(per_group.values()) / min(per_group.values())
    print()
    print(f"{args.streams:,} streams x {args.topics_per_stream} topics x "
          f"{args.partitions_per_topic} partitions = {partitions:,} partitions over "
          f"{topics:,} topics, 3 store groups; seeding {seed_s:.0f} s")
    print()
    print("| measure | figures | target | met? |")
    print("| --- | --- | --- | --- |")
    ok = True
    for label, times in ((f"answered (Metadata v1 on the wire, {args.requests} requests)", wire),
                         (f"in the client ({args.requests} x AdminClient.list_topics)", meta)):
        p99 = _percentile(times, 0.99)
        ok &= p99 < METADATA_TARGET_MS
        print(f"| Metadata, all {topics:,} topics, {label} | p50 {statistics.median(times):.0f}"
              f" ms, p99 {p99:.0f} ms | p99 < 200 ms | "
              f"{'yes' if p99 < METADATA_TARGET_MS else 'no'} |")
    for label, times in (("CreateTopics (AdminClient.create_topics)", kafka_creates),
                         ("topic_create + first ensure_topic (service)", svc)):
        p95 = _percentile(times, 0.95)
        ok &= p95 < CREATE_TARGET_MS
        print(f"| topic create, {label}, {len(times)} topics of {args.partitions_per_topic} "
              f"partitions | p50 {statistics.median(times):.0f} ms, p95 {p95:.0f} ms | "
              f"< 100 ms | {'yes' if p95 < CREATE_TARGET_MS else 'no'} |")
    print(f"| Metadata, all {topics:,} topics, the listener's CPU per list_topics | "
          f"{listener_ms:.0f} ms | | |")
    groups = ", ".join(f"{g} {n:,}" for g, n in sorted(per_group.items()))
    print(f"| placement spread (partitions per group) | {groups}; max/min {ratio:.3f} | "
          f"within 10% | {'yes' if ratio <= SPREAD_TARGET else 'no'} |")
    ok &= ratio <= SPREAD_TARGET
    for label, path, server, _trips, _size in pages:
        p95 = _percentile(server, 0.95)
        ok &= p95 < PAGE_TARGET_MS
        print(f"| portal, {label} `{path}` ({len(server)} requests, server time) | p50 "
              f"{statistics.median(server):.0f} ms, p95 {p95:.0f} ms | p95 < 300 ms | "
              f"{'yes' if p95 < PAGE_TARGET_MS else 'no'} |")
    return 0 if ok else 1


def _pages(scene: Scene, stream: int, count: int) -> list[tuple]:
    """The portal's main pages on the scene, as bench/pages.py times them (alice's tenant
    holds every stream; the stream page is one of 10 topics of 10 partitions)."""
    scene.manage("collectstatic", "--no-input", "-v0")  # the manifest the pages name
    scene.start()
    pages = {"overview": "/", "streams list": "/streams/", "stream page": f"/streams/{stream}/",
             "stream topics tab": f"/streams/{stream}/topics/", "consumer groups": "/groups/",
             "usage": "/usage/"}
    return measure(scene, pages, count, [])
