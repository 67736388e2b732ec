"""`python -m bench store|produce|kafka|replication|sync|spark|failback|pages|sockets ...`:
the project's benchmark commands (see docs/benchmarks.md)."""

import argparse
import sys

from bench import failback, kafka, pages, produce, replication, sockets, spark, store, sync


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    store.add_arguments(sub.add_parser("store", help="message store append and read throughput"))
    produce.add_arguments(sub.add_parser("produce", help="produce and consume through the API"))
    kafka.add_arguments(sub.add_parser(
        "kafka", help="Kafka listener produce and consume with librdkafka, beside raw COPY and "
        "REST"))
    replication.add_arguments(sub.add_parser(
        "replication", help="replication catch-up, steady-state lag and idle cost"))
    sync.add_arguments(sub.add_parser(
        "sync", help="produce latency with a synchronous replica beside an asynchronous one"))
    spark.add_arguments(sub.add_parser(
        "spark", help="copystream and diffstreams (cold and warm) next to a raw binary COPY pipe "
        "and the same copy by the gateways"))
    failback.add_arguments(sub.add_parser(
        "failback", help="failback after a forced failover (1,000,000 promoted, 10,000 "
        "divergent) beside a copystream of the promoted stream, in the same run"))
    pages.add_arguments(sub.add_parser(
        "pages", help="server time of the overview and stream pages with 1,000 streams"))
    sockets.add_arguments(sub.add_parser(
        "sockets", help="lag updates reaching 200 dashboard websockets while the engine runs; "
                        "the topology page under 200 link events/s"))
    args = parser.parse_args(argv)
    return {"store": store.main, "produce": produce.main, "kafka": kafka.main,
            "replication": replication.main,
            "sync": sync.main, "spark": spark.main, "failback": failback.main, "pages": pages.main,
            "sockets": sockets.main}[args.bench](args)


if __name__ == "__main__":
    sys.exit(main())
