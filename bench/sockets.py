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
    parser.add_argument("--topology-rate", type=float, default=200.0,
                        help="link events a second at the open topology page")
    parser.add_argument("--topology-seconds", type=float, default=20.0)
    parser.add_argument("--topology-view", choices=("streams", "clusters"), default=None,
                        help="the page's view (default: the page's own choice, clusters for "
                             "a tenant this large)")
    parser.add_argument("--only", choices=("sockets", "topology"), default=None,
                        help="run one of the two measures (default: both)")


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
    ok = True
    if args.only != "topology":
        ok &= sockets_main(args) == 0
    if args.only != "sockets":
        ok &= topology_main(args) == 0
    return 0 if ok else 1


def sockets_main(args: argparse.Namespace) -> int:
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



# --- the topology page under a storm of link events ---------------------------------------------

TOPOLOGY_STREAMS, TOPOLOGY_LINKS = 1000, 2000
MONITOR = """() => {
  window.__mon = {stalls: [], events: 0};
  let last = performance.now();
  setInterval(() => { const now = performance.now(); __mon.stalls.push(now - last - 50);
                      last = now; }, 50);
  document.addEventListener("streamgate:event", e => {
    if (e.detail.event === "replica.lag") { __mon.events += 1; } });
}"""


def storm(rate: float) -> None:
    """"replica.lag" events of every link in turn, `rate` a second, through the channel layer
    the portal's sockets listen on (as replication.events.publish_after_commit sends them),
    from one asyncio loop: the publisher's own cost is not what is measured."""
    import asyncio

    import orjson
    from channels.layers import get_channel_layer

    from replication.events import tenant_group
    from replication.models import ReplicaLink

    links = list(ReplicaLink.objects.values_list("pk", "source_id", "replica_id",
                                                 "source__tenant_id"))
    layer = get_channel_layer()

    async def run() -> None:
        start, n = time.monotonic(), 0
        while True:
            pk, source, replica, tenant = links[n % len(links)]
            text = orjson.dumps({"event": "replica.lag", "payload": {
                "link": pk, "source": source, "replica": replica, "messagesPending": n % 50,
                "bytesPending": n % 50 * 100, "timeLagMs": n % 5000, "stalled": n % 7 == 0,
                "t": time.time() * 1000}}).decode()
            await layer.group_send(tenant_group(tenant), {"type": "replication.event",
                                                          "text": text})
            n += 1
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))

    asyncio.run(run())


def _page_probe(page, seconds: float) -> dict:  # type: ignore[no-untyped-def]
    """While the storm runs: main-thread stalls (a 50 ms timer's lateness) and events the page
    handled, with a script round trip every half second; then, storm still on, how long three
    redraws (what a filter change costs: elements rebuilt, layout run) take."""
    page.evaluate(MONITOR)
    trips = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        page.evaluate("1")
        trips.append((time.perf_counter() - started) * 1000)
        time.sleep(0.5)
    found = page.evaluate("() => ({stalls: __mon.stalls, events: __mon.events})")
    redraws = [page.evaluate("""() => { const t = performance.now();
        streamgateTopology.draw(); return performance.now() - t; }""") for _ in range(3)]
    return {"stalls": [max(0.0, s) for s in found["stalls"]] or [0.0], "events": found["events"],
            "trips": trips, "redraws": redraws}


def _stale_arrows(page) -> int:  # type: ignore[no-untyped-def]
    """Once the storm is over and the page has repainted: arrows whose colour is not their
    link's health after its last event (0 when every event was applied)."""
    page.wait_for_function("""() => { const S = streamgateTopology.state;
        return !S.lagFrame && !Object.keys(S.dirty).length; }""", timeout=60_000)
    return page.evaluate("""() => { const S = streamgateTopology.state;
        return S.cy.edges("[link]").filter(e => e.data("health") !== S.links[e.data("link")].health)
          .length; }""")


def _topology_measure(scene: Scene, args: argparse.Namespace) -> dict:
    from playwright.sync_api import sync_playwright

    from bench.pages import PASSWORD

    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{scene.url}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{scene.url}/topology/")
        page.wait_for_selector('#topology[data-ready="1"]', timeout=60_000)
        page.wait_for_selector('#live-status[data-state="open"]', timeout=60_000)
        if args.topology_view:
            page.select_option("#f-group", args.topology_view)
            page.wait_for_selector('#topology[data-ready="1"]')
        view = page.eval_on_selector("#f-group", "el => el.value")
        stormer = scene.spawn(["manage.py", "shell", "-c",
                               f"from bench.sockets import storm; storm({args.topology_rate})"])
        time.sleep(5)  # the storm's Django start-up
        result = _page_probe(page, args.topology_seconds)
        stormer.terminate()
        result["stale"] = _stale_arrows(page)
        result["view"] = view
        result["edges"] = int(page.eval_on_selector("#topology", "el => el.dataset.edges"))
        browser.close()
    return result


def topology_main(args: argparse.Namespace) -> int:
    scene = Scene(args.url, args.server, "topology")
    try:
        scene.create(TOPOLOGY_STREAMS, 64, TOPOLOGY_LINKS)
        scene.start()
        found = _topology_measure(scene, args)
    finally:
        scene.stop()
    stall95, trip95 = _percentile(found["stalls"], 0.95), _percentile(found["trips"], 0.95)
    rate = found["events"] / args.topology_seconds
    print()
    print(f"topology page of {TOPOLOGY_STREAMS:,} streams and {TOPOLOGY_LINKS:,} links in "
          f"Debian's chromium ({found['view']} view, {found['edges']} arrows drawn), "
          f"{args.topology_rate:.0f} link events/s for {args.topology_seconds:.0f} s")
    print()
    print("| measure | value |")
    print("| --- | ---: |")
    print(f"| link events handled by the page per second | {rate:.0f} |")
    print(f"| main-thread stall p95 / max (ms, a 50 ms timer's lateness) | {stall95:.0f} / "
          f"{max(found['stalls']):.0f} |")
    print(f"| script round trip p95 (ms) | {trip95:.0f} |")
    print(f"| redraw after a filter change p50 / p95 (ms) | "
          f"{statistics.median(found['redraws']):.0f} / "
          f"{_percentile(found['redraws'], 0.95):.0f} |")
    print(f"| arrows not showing their link's last event, once repainted | {found['stale']} |")
    ok = (rate >= 0.9 * args.topology_rate and stall95 < 100 and trip95 < 250
          and found["stale"] == 0)
    print("| responsive (events kept up and applied, stall p95 < 100 ms, round trip p95 < 250 ms) "
          f"| {'yes' if ok else 'no'} |")
    return 0 if ok else 1
