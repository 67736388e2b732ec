"""Lag updates reaching many open dashboard websockets while the engine replicates.

The scene of bench/pages.py (smaller by default), served as production serves it (uvicorn with
two workers, the Redis pub/sub channel layer), with the engine running as processes: the
replicator, a gateway of newyork and a producer writing to the hub stream (so the replicator
publishes its own "replica.lag" events as the backlog moves). N websocket clients (default 200)
signed in as alice hold /ws/replication/ open on the overview's behalf.

Latency: a pulse process publishes a "replica.lag" event of the hub's first link through the
portal's own path (replication.events.publish_after_commit -> channel layer -> each socket's
consumer -> the socket) every 250 ms, stamped with the time it was published; each client
notes when it arrives. The engine's own events are counted per socket beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import re
import statistics
import time
from typing import Any

from bench.pages import Scene, _percentile
from bench.produce import SERVERS

PULSE_EVERY = 0.25
GRACE = 15.0  # seconds after the last pulse before the sockets close
PULSE = re.compile(r'"t": ?([0-9.]+), ?"pulse": ?(\d+)')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the measure")
    parser.add_argument("--rate", type=float, default=500.0, help="produced messages/s")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--server", choices=sorted(SERVERS), default="uvicorn")
    parser.add_argument("--layer", choices=("pubsub", "core"), default="pubsub",
                        help="channels-redis layer: the settings' own (pubsub) or, to compare, "
                             "core (bench/core_settings.py)")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")


def trickle(rate: float) -> None:
    """The producer (inside Django): batches of 50 to the hub, `rate` messages a second."""
    from django.contrib.auth import get_user_model

    from replication.engine.store import Record
    from replication.models import Stream
    from replication.services.messages import messages_produce

    alice = get_user_model().objects.get(username="alice")
    hub = Stream.objects.select_related("cluster").get(path="/mapr/sanfrancisco/hub")
    batch, n = 50, 0
    while True:
        started = time.monotonic()
        messages_produce(actor=alice, stream=hub, topic="clicks",
                         records=[Record(f"m{n + i}".encode(), key=str(i).encode())
                                  for i in range(batch)])
        n += batch
        time.sleep(max(0.0, batch / rate - (time.monotonic() - started)))


def pulse(every: float) -> None:
    """Stamped "replica.lag" events of the hub's first link, published as the engine does."""
    from replication.events import publish_after_commit
    from replication.models import ReplicaLink

    link = ReplicaLink.objects.select_related("source", "replica").order_by("idx").first()
    tenants = {link.source.tenant_id, link.replica.tenant_id}
    seq = 0
    while True:
        seq += 1
        publish_after_commit(tenant_ids=tenants, event="replica.lag", payload={
            "link": link.pk, "source": link.source_id, "replica": link.replica_id,
            "messagesPending": 0, "bytesPending": 0, "timeLagMs": 0, "stalled": False,
            "t": time.time() * 1000, "pulse": seq})
        time.sleep(every)


class Client:
    def __init__(self, latest: Any) -> None:
        self.latest = latest  # the highest pulse any socket saw (shared between processes)
        self.latencies: list[tuple[int, float]] = []  # (pulse, ms)
        self.engine_events = 0
        self.pulses: set[int] = set()

    async def run(self, url: str, origin: str, cookie: str, opened: asyncio.Event,
                  ready: list[int], total: int, stop: asyncio.Event) -> None:
        import websockets

        async with websockets.connect(url, origin=origin, additional_headers={
                "Cookie": cookie}, open_timeout=60, max_queue=None) as socket:
            ready.append(1)
            if len(ready) == total:
                opened.set()
            closer = asyncio.create_task(_close_when(stop, socket))
            async for raw in socket:  # ends when the closer closes the socket
                now = time.time() * 1000
                # No JSON parse per message: 200 sockets in one client process would measure
                # the client's own parsing under load, not the portal.
                found = PULSE.search(raw)
                if found:
                    seq = int(found.group(2))
                    self.pulses.add(seq)
                    if seq > self.latest.value:
                        self.latest.value = seq
                    self.latencies.append((seq, now - float(found.group(1))))
                elif '"replica.lag"' in raw:
                    self.engine_events += 1
            await closer


async def _close_when(stop: asyncio.Event, socket) -> None:  # type: ignore[no-untyped-def]
    await stop.wait()
    await socket.close()


def _clients(url: str, origin: str, cookie: str, count: int, opened: Any, stop: Any,
             latest: Any, results: Any) -> None:
    """One client process: `count` sockets on one asyncio loop."""

    async def run() -> None:
        clients = [Client(latest) for _ in range(count)]
        all_open, closing, ready = asyncio.Event(), asyncio.Event(), []
        tasks = []
        for client in clients:  # a few at a time, as browsers opening pages would
            tasks.append(asyncio.create_task(client.run(url, origin, cookie, all_open, ready,
                                                        count, closing)))
            await asyncio.sleep(0.02)
        await asyncio.wait_for(all_open.wait(), timeout=180)
        opened.put(count)
        while not stop.is_set():
            await asyncio.sleep(0.1)
        closing.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        results.put([(c.latencies, c.engine_events, sorted(c.pulses)) for c in clients])

    asyncio.run(run())


def _measure(scene: Scene, args: argparse.Namespace) -> tuple[list, tuple[int, int]]:
    """The sockets spread over client processes, so the client is not what is measured."""
    session = scene.session()
    cookie = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
    url = scene.url.replace("http://", "ws://") + "/ws/replication/"
    opened, results = multiprocessing.Queue(), multiprocessing.Queue()
    stop, latest = multiprocessing.Event(), multiprocessing.Value("q", 0)
    shares = [args.sockets // args.clients + (i < args.sockets % args.clients)
              for i in range(args.clients)]
    workers = [multiprocessing.Process(target=_clients, args=(
        url, scene.url, cookie, n, opened, stop, latest, results)) for n in shares]
    for worker in workers:
        worker.start()
    assert sum(opened.get(timeout=240) for _ in workers) == args.sockets
    print(f"{args.sockets} sockets open in {args.clients} client processes", flush=True)
    pulser = scene.spawn(["manage.py", "shell", "-c",
                          f"from bench.sockets import pulse; pulse({PULSE_EVERY})"])
    # The pulser's start (a Django process) is not measured: from its first pulses on.
    deadline = time.monotonic() + 180
    while latest.value == 0:
        assert time.monotonic() < deadline, "no pulse arrived"
        time.sleep(0.1)
    time.sleep(2)
    first = latest.value + 1
    time.sleep(args.seconds)
    last = latest.value
    pulser.terminate()
    time.sleep(GRACE)  # the last pulses in flight
    stop.set()
    gathered = [row for _ in workers for row in results.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=30)
    return gathered, (first, last)


def main(args: argparse.Namespace) -> int:
    scene = Scene(args.url, args.server, "sockets")
    if args.layer == "core":
        scene.env["DJANGO_SETTINGS_MODULE"] = "bench.core_settings"
    try:
        scene.create(args.streams, args.replicas)
        scene.start(["manage.py", "runreplicator"],
                    ["manage.py", "rungateway", "--cluster", "newyork", "--name", "gw1",
                     "--loglevel", "WARNING"],
                    ["manage.py", "shell", "-c",
                     f"from bench.sockets import trickle; trickle({args.rate})"])
        time.sleep(3)  # the engine picks the links up
        rows, (first, last) = _measure(scene, args)
    finally:
        scene.stop()
    latencies = [ms for lat, _, _ in rows for seq, ms in lat if first <= seq <= last]
    latencies = latencies or [float("nan")]
    sent = max(0, last - first + 1)
    received = sum(1 for _, _, pulses in rows for seq in pulses if first <= seq <= last)
    engine = [count for _, count, _ in rows]
    print()
    print(f"{args.sockets} websockets ({args.clients} client processes) on {args.server} "
          f"(2 workers, Redis {args.layer} layer), "
          f"engine running (replicator, gateway, {args.rate:.0f} msg/s produced), "
          f"{args.seconds:.0f} s, a stamped lag event every {PULSE_EVERY * 1000:.0f} ms")
    print()
    print("| measure | value |")
    print("| --- | ---: |")
    print(f"| stamped lag events published | {sent} |")
    print(f"| deliveries expected / arrived by {GRACE:.0f} s after the last | "
          f"{sent * args.sockets:,} / {received:,} |")
    for label, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        print(f"| publish -> socket latency {label} (ms) | {_percentile(latencies, q):.1f} |")
    print(f"| max (ms) | {max(latencies):.1f} |")
    print(f"| engine's own replica.lag events per socket (median) | "
          f"{statistics.median(engine):.0f} |")
    ok = received == sent * args.sockets and _percentile(latencies, 0.99) < 1000
    print(f"| p99 < 1 s and every delivery arrived | {'yes' if ok else 'no'} |")
    return 0 if ok else 1

