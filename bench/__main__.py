"""`python -m bench store|produce|replication ...`: the project's benchmark commands (see
docs/benchmarks.md)."""

import argparse
import sys

from bench import produce, replication, store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    store.add_arguments(sub.add_parser("store", help="message store append and read throughput"))
    produce.add_arguments(sub.add_parser("produce", help="produce and consume through the API"))
    replication.add_arguments(sub.add_parser(
        "replication", help="replication catch-up, steady-state lag and idle cost"))
    args = parser.parse_args(argv)
    return {"store": store.main, "produce": produce.main,
            "replication": replication.main}[args.bench](args)


if __name__ == "__main__":
    sys.exit(main())
