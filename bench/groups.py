"""Store groups as Kafka clients see them (issue 33): `python -m bench groups`.

One deployment as bench/kafka.py serves it (a private PostgreSQL, a production-mode portal, one
Kafka listener), and in it, each with a stream `produce` and a topic `t` of PARTITIONS
partitions:
- `bench`: today's single store, a cluster that never had a group added;
- `single`: a cluster that had a second group added and removed: one group again (the same
  code path as `bench`: with one group `store_for` returns the plain store, no router);
- `routed`: a cluster of two groups whose topic is placed whole on its home group `s1` (the
  topic made before `s2` was added; `s2` an empty database on the same server): every call
  goes through the router (replication/storerouter.py) to the same one store, so the
  difference from `bench` is the routing alone.

Parts (`--parts`, all by default):
- fence: bench/fencecost.py, the placement fence's cost on a store's appends, in the engine on
  the local PostgreSQL (no deployment);
- routing: per run, Kafka produce then consume (bench/kafka.py's kafka_produce and
  kafka_consume) of `--messages` on each cluster, the order rotated each run, with the CPU
  the listener and the PostgreSQL server spent; medians and the ratio to `bench` per run;
- cutover: bench/cutover.py, the delivery latency a producer sees while its partition moves;
- servers: a cluster `wide` of two groups on SEPARATE PostgreSQL servers (the second a private
  server of its own), its topic's partitions spread over both, produced to and consumed from
  beside `bench`;
  with each group's stored bytes, the connections each server holds and the listener's memory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from bench.kafka import PARTITIONS, Listener, _kafka_config, ends, kafka_consume, kafka_produce
from bench.kafka import served as kafka_served
from bench.pgserver import PrivatePostgres
from bench.pipes import add_layout_argument
from bench.produce import Portal

PARTS = ("fence", "routing", "cutover", "servers")
OVERHEAD_TARGET = 0.05
ROUTING = (("bench", "plain store (never a group added)"),
           ("single", "one group (a second added, then removed)"),
           ("routed", "router, two groups, the topic whole on s1"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="per produce or consume (fewer: coarse CPU figures, 10 ms ticks)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--moves", type=int, default=3, help="cutover: partition moves")
    parser.add_argument("--rate", type=int, default=2000, help="cutover: the producer's msg/s")
    parser.add_argument("--history", type=int, default=200_000,
                        help="cutover: messages in the partition before the first move")
    parser.add_argument("--fence-appends", type=int, default=2000, help="fence: per store")
    parser.add_argument("--fence-records", type=int, default=1000, help="fence: per append")
    add_layout_argument(parser)


# --- the deployment ---------------------------------------------------------------------------


def topic_of(cluster: str) -> str:
    return f"/mapr/{cluster}/produce:t"


def store_of(portal: Portal, cluster: str) -> str:
    """The URL of a cluster's own store (its home group), beside the control database."""
    return portal.env["DATABASE_URL"].replace("postgres://", "postgresql://", 1) \
        + f"_store_{cluster}"


def beside(portal: Portal, name: str) -> str:
    """A database on the portal's server, dropped with the portal's (its name starts so)."""
    return portal.server.rsplit("/", 1)[0] + f"/{portal.name}_{name}"


def make_cluster(client, cluster: str, partitions: int = PARTITIONS,  # type: ignore[no-untyped-def]
                 group_first: str = "") -> None:
    """The cluster, its stream `produce` and topic `t`; with `group_first`, a group `s2` at
    that URL added before the topic, so the topic's partitions spread over both groups."""
    client.call("cluster create", {"name": cluster})
    if group_first:
        add_group(client, cluster, group_first)
    client.call("stream create", {"path": f"/mapr/{cluster}/produce"})
    client.call("stream topic create", {"path": f"/mapr/{cluster}/produce", "topic": "t",
                                        "partitions": partitions})


def add_group(client, cluster: str, url: str) -> None:  # type: ignore[no-untyped-def]
    client.call("cluster store add", {"cluster": cluster, "name": "s2", "url": url})


def placed(client, cluster: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Partitions per group, as `cluster store list` counts them."""
    return {row["name"]: row["partitions"]
            for row in client.call("cluster store list", {"cluster": cluster})}


def settle() -> None:
    """Past a placement refresh (placement.REFRESH_SECONDS): every process sees the groups."""
    time.sleep(3.0)


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def each(values: list[float]) -> str:
    return ", ".join(f"{v / 1000:,.0f}k" for v in values)


def ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y if y else float("nan") for x, y in zip(a, b, strict=True)]


def listed(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


# --- routing ------------------------------------------------------------------------------------


def prepare_routing(portal: Portal, client) -> None:  # type: ignore[no-untyped-def]
    for cluster in ("single", "routed"):
        make_cluster(client, cluster)
        add_group(client, cluster, beside(portal, f"{cluster}_s2"))
    client.call("cluster store remove", {"cluster": "single", "name": "s2"})
    where = placed(client, "routed")
    if where.get("s2"):
        raise RuntimeError(f"the routed topic is not whole on s1: {where}")
    settle()


MEASURES = ("produce", "consume", "cpu_produce", "cpu_consume", "pg_produce", "pg_consume")


def server_cpu(url: str) -> float:
    """CPU seconds of the PostgreSQL server at `url`'s port so far: its postmaster, its live
    processes and those it has reaped (a postmaster's cutime and cstime)."""
    port = f"\0-p\0{urlsplit(url).port}\0".encode()
    stats = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit():
                stats[int(proc.name)] = ((proc / "cmdline").read_bytes(),
                                         (proc / "stat").read_text().rsplit(")", 1)[1].split())
    master = next(pid for pid, (cmd, _) in stats.items() if b"postgres" in cmd and port in cmd)
    ticks = sum(int(f[11]) + int(f[12]) for pid, (_, f) in stats.items()
                if pid == master or int(f[1]) == master)
    fields = stats[master][1]
    return (ticks + int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def produce_consume(portal: Portal, listener: Listener, config: dict, cluster: str,
                    messages: int) -> dict[str, float]:
    """Msg/s of a produce then a consume of `messages`, and the CPU the listener and the
    PostgreSQL server spent on each, in ms per 1,000 messages (less swayed than the rates by
    the others sharing the machine)."""
    starts = ends(store_of(portal, cluster)) or dict.fromkeys(range(PARTITIONS), 0)
    got: dict[str, float] = {}
    for phase, run in (("produce", lambda: kafka_produce(config, messages,
                                                         topic=topic_of(cluster))),
                       ("consume", lambda: kafka_consume(config, starts, messages,
                                                         topic=topic_of(cluster)))):
        cpu, pg = listener.cpu_seconds(), server_cpu(portal.server)
        got[phase] = run()
        got[f"cpu_{phase}"] = (listener.cpu_seconds() - cpu) * 1e6 / messages
        got[f"pg_{phase}"] = (server_cpu(portal.server) - pg) * 1e6 / messages
    return got


def routing(portal: Portal, listener: Listener, config: dict, client,  # type: ignore[no-untyped-def]
            args: argparse.Namespace) -> list[str]:
    prepare_routing(portal, client)
    names = [name for name, _ in ROUTING]
    results = {m: {n: [] for n in names} for m in MEASURES}
    started = load()
    for run in range(args.runs):
        for name in names[run % 3:] + names[:run % 3]:
            for measure, value in produce_consume(portal, listener, config, name,
                                                  args.messages).items():
                results[measure][name].append(value)
        print(f"run {run + 1}: " + "  ".join(
            f"{n} {results['produce'][n][-1]:,.0f}/{results['consume'][n][-1]:,.0f} msg/s "
            f"{results['cpu_produce'][n][-1]:.2f}/{results['cpu_consume'][n][-1]:.2f} ms/1k"
            for n in names), flush=True)
    return routing_table(results, args, started)


def _cells(figures: dict[str, list[float]], name: str, rate: bool) -> str:
    r = ratios(figures[name], figures["bench"])
    values = each(figures[name]) if rate else ", ".join(f"{v:.2f}" for v in figures[name])
    middle = f"{statistics.median(figures[name]):,.0f}" if rate else \
        f"{statistics.median(figures[name]):.2f}"
    return f"{middle} | {values} | {statistics.median(r):.3f} ({listed(r)})"


SECTIONS = (("", "msg/s"), ("cpu_", "listener CPU, ms per 1,000 messages"),
            ("pg_", "PostgreSQL server CPU, ms per 1,000 messages"))


def routing_table(results: dict[str, dict[str, list[float]]], args: argparse.Namespace,
                  started: str) -> list[str]:
    lines = [f"{args.messages:,} messages of 200 B per produce and consume, {PARTITIONS} "
             f"partitions, one listener, medians of {args.runs} runs (order rotated each run); "
             f"load average {started} at the start, {load()} at the end", ""]
    for prefix, what in SECTIONS:
        lines += [f"| store of the cluster | produce {what} (median) | each run | vs plain | "
                  f"consume {what} (median) | each run | vs plain |",
                  "| --- | ---: | --- | --- | ---: | --- | --- |"]
        lines += [f"| {label} | {_cells(results[prefix + 'produce'], name, not prefix)} | "
                  f"{_cells(results[prefix + 'consume'], name, not prefix)} |"
                  for name, label in ROUTING]
        lines.append("")

    def overheads(name: str) -> tuple[float, float]:
        """(throughput, CPU) overhead of `name` against the plain store: the worse of produce
        and consume, each the median of per-run ratios."""
        def median(measure: str) -> float:
            return statistics.median(ratios(results[measure][name], results[measure]["bench"]))

        return (max(1 - median(m) for m in ("produce", "consume")),
                max(median(f"{p}{m}") - 1 for p in ("cpu_", "pg_") for m in ("produce",
                                                                               "consume")))

    rate, cpu = overheads("routed")
    twin_rate, twin_cpu = overheads("single")
    lines.append(f"Routing overhead, the router against the plain store (medians of per-run "
                 f"ratios, the worse of produce and consume): throughput {rate * 100:+.1f}%, "
                 f"CPU {cpu * 100:+.1f}% (target at most 5%: "
                 f"{'met' if max(rate, cpu) <= OVERHEAD_TARGET else 'not met'}). The plain "
                 f"store's own path measured the same way (`single`, no router): throughput "
                 f"{twin_rate * 100:+.1f}%, CPU {twin_cpu * 100:+.1f}%: the run's noise.")
    return lines


# --- two groups on separate servers -------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def connections(url: str) -> int:
    """Client connections the server holds, this probe's own not counted."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                            "'client backend' AND pid <> pg_backend_pid()").fetchone()[0]


def size(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def busy() -> tuple[int, int]:
    """The machine's (busy, total) CPU ticks so far, all cores (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # idle and iowait are not busy


def measured(listener: Listener, config: dict, cluster: str, messages: int) -> dict[str, float]:
    """A produce's msg/s, the listener's CPU ms per 1,000 messages and the machine's busy
    share of all its cores during it (%); then a consume of as many messages from the topic's
    start (the groups' every partition) and its msg/s and listener CPU."""
    cpu, (used, total) = listener.cpu_seconds(), busy()
    rate = kafka_produce(config, messages, topic=topic_of(cluster))
    used_after, total_after = busy()
    produced = listener.cpu_seconds()
    consume = kafka_consume(config, dict.fromkeys(range(PARTITIONS), 0), messages,
                            topic=topic_of(cluster))
    return {"rate": rate, "cpu": (produced - cpu) * 1e6 / messages,
            "busy": 100 * (used_after - used) / (total_after - total), "consume": consume,
            "consume_cpu": (listener.cpu_seconds() - produced) * 1e6 / messages}


def servers(portal: Portal, listener: Listener, config: dict, client,  # type: ignore[no-untyped-def]
            args: argparse.Namespace) -> list[str]:
    before = rss_mb(listener.process.pid)
    with PrivatePostgres(prefix="sgbench-groups-") as second:
        s2 = second.url("wide_s2")
        make_cluster(client, "wide", group_first=s2)
        settle()
        kafka_produce(config, 10_000, topic=topic_of("wide"))  # the groups' pools opened
        opened = rss_mb(listener.process.pid)
        s1 = store_of(portal, "wide")
        sizes = {"s1": size(s1), "s2": size(s2)}
        got: dict[str, list[dict[str, float]]] = {"bench": [], "wide": []}
        started = load()
        for run in range(args.runs):
            for name in ("bench", "wide") if run % 2 == 0 else ("wide", "bench"):
                got[name].append(measured(listener, config, name, args.messages))
            print(f"run {run + 1}: " + "  ".join(
                f"{n} {got[n][-1]['rate']:,.0f}/s {got[n][-1]['cpu']:.2f} ms/1k "
                f"{got[n][-1]['busy']:.0f}% busy, consume {got[n][-1]['consume']:,.0f}/s"
                for n in got), flush=True)
        grown = {g: (size(u) - sizes[g]) / 1e6 for g, u in (("s1", s1), ("s2", s2))}
        held = connections(s2)
        where = placed(client, "wide")  # each partition is placed at its first write
    return servers_table(got, where, grown, held,
                         (before, opened, rss_mb(listener.process.pid)), started, args)


def servers_table(got: dict[str, list[dict[str, float]]], where: dict[str, int],
                  grown: dict[str, float], held: int, rss: tuple[float, float, float],
                  started: str,
                  args: argparse.Namespace) -> list[str]:
    total = args.runs * args.messages
    lines = [f"{args.messages:,} messages of 200 B per produce, {PARTITIONS} partitions "
             f"({', '.join(f'{g} {n}' for g, n in sorted(where.items()))}), one producer, one "
             f"listener, medians of {args.runs} runs (order alternated); load average "
             f"{started} at the start, {load()} at the end", "",
             "| cluster | measure | msg/s (median) | each run | vs one group | listener CPU ms "
             "per 1,000 | machine busy (2 cores) |",
             "| --- | --- | ---: | --- | --- | ---: | ---: |"]
    for name, label in (("bench", "one group (`bench`)"),
                        ("wide", "two groups on two servers (`wide`)")):
        for what, rate, cpu in (("produce", "rate", "cpu"),
                                ("consume", "consume", "consume_cpu")):
            rates = [g[rate] for g in got[name]]
            r = ratios(rates, [g[rate] for g in got["bench"]])
            busy_share = (f"{statistics.median(g['busy'] for g in got[name]):.0f}%"
                          if what == "produce" else "")
            lines.append(f"| {label} | {what} | {statistics.median(rates):,.0f} | "
                         f"{each(rates)} | {statistics.median(r):.3f} ({listed(r)}) | "
                         f"{statistics.median(g[cpu] for g in got[name]):.2f} | {busy_share} |")
    return [*lines, "", f"Stored by the runs ({total:,} messages to `wide`): "
                    + ", ".join(f"{g} {mb:,.0f} MB" for g, mb in grown.items())
                    + f", {sum(grown.values()) * 1e6 / total:,.0f} B/message in all (database "
                    f"size, WAL not counted). The second server holds {held} client connections "
                    f"(the listener's pool and the portal's 2 workers'). Listener RSS "
                    f"{rss[0]:,.0f} MB before `wide`, {rss[1]:,.0f} MB once it wrote to both "
                    f"groups (10,000 messages), {rss[2]:,.0f} MB after the runs."]


# --- the command --------------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    from bench.cutover import cutover
    from bench.fencecost import fence_cost
    from streamgate.client import Client

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"--parts: unknown {', '.join(sorted(unknown))}; choose of "
                         f"{', '.join(PARTS)}")
    out: list[str] = []
    if "fence" in parts:
        out += ["", "The placement fence on a store's appends", "",
                *fence_cost(args.fence_appends, args.fence_records)]
    if set(parts) <= {"fence"}:
        print("\n".join(out))
        return 0
    with kafka_served(args) as (portal, listener, token, _stream):
        client = Client(portal.url, token, timeout=600)
        config = _kafka_config(f"127.0.0.1:{listener.port}", token)
        if "routing" in parts:
            out += ["", "Routing overhead", "", *routing(portal, listener, config, client, args)]
        if "cutover" in parts:
            out += ["", "Cut-over seen by a producer", "",
                    *cutover(portal, config, client, args)]
        if "servers" in parts:
            out += ["", "Two groups on two PostgreSQL servers", "",
                    *servers(portal, listener, config, client, args)]
    print("\n".join(out))
    return 0
