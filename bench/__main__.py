"""`python -m bench store|produce|kafka|replication|sync|spark|failback|pages|sockets|sasl|
quotas|compaction|conformance ...`: the project's benchmark commands (see docs/benchmarks.md), and
librdkafka's suite."""

import argparse
import sys

from bench import (
    compaction,
    conformance,
    failback,
    groups,
    ha,
    kafka,
    pages,
    partitions,
    partitions_idle,
    produce,
    quotas,
    replication,
    sasl,
    sockets,
    spark,
    store,
    sync,
)

# Each command's module (its add_arguments and main) and its one-line help.
COMMANDS = {
    "store": (store, "message store append and read throughput"),
    "produce": (produce, "produce and consume through the API"),
    "kafka": (kafka, "Kafka listener produce and consume with librdkafka, beside raw COPY and "
                     "REST"),
    "replication": (replication, "replication catch-up, steady-state lag and idle cost"),
    "sync": (sync, "produce latency with a synchronous replica beside an asynchronous one"),
    "spark": (spark, "copystream and diffstreams (cold and warm) next to a raw binary COPY pipe "
                     "and the same copy by the gateways"),
    "failback": (failback, "failback after a forced failover (1,000,000 promoted, 10,000 "
                           "divergent) beside a copystream of the promoted stream"),
    "pages": (pages, "server time of the overview and stream pages with 1,000 streams"),
    "sockets": (sockets, "lag updates reaching 200 dashboard websockets while the engine runs; "
                         "the topology page under 200 link events/s"),
    "sasl": (sasl, "a Kafka connection's sign-in: SASL/PLAIN beside SCRAM-SHA-256 and -512"),
    "quotas": (quotas, "one tenant at its produce quota beside another: the other's latency"),
    "ha": (ha, "the replicated group: produce latency with a synchronous standby beside a single "
               "server, and time from a primary's (and Redis master's) death to the next ack"),
    "partitions": (partitions, "many partitions (issue 33): Metadata for all topics, topic create "
                               "time and placement spread over 3 store groups"),
    "groups": (groups, "store groups as Kafka clients see them (issue 33): routing overhead "
                       "with one group, the cut-over pause a producer sees during partition "
                       "moves, two groups on two PostgreSQL servers"),
    "partitions-idle": (partitions_idle, "many partitions (issue 33), half of the streams "
                                         "replicated: the whole deployment's CPU when idle"),
    "compaction": (compaction, "log compaction of a partition (issue 31) in the worker's "
                               "process beside the Spark passes"),
    "conformance": (conformance, "librdkafka's own regression suite against a listener"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    for name, (module, summary) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=summary))
    args = parser.parse_args(argv)
    return COMMANDS[args.bench][0].main(args)


if __name__ == "__main__":
    sys.exit(main())
