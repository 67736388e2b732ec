"""`python -m bench store|produce ...`: the project's benchmark commands (see
docs/benchmarks.md)."""

import argparse
import sys

from bench import produce, store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    store.add_arguments(sub.add_parser("store", help="message store append and read throughput"))
    produce.add_arguments(sub.add_parser("produce", help="produce and consume through the API"))
    args = parser.parse_args(argv)
    return {"store": store.main, "produce": produce.main}[args.bench](args)


if __name__ == "__main__":
    sys.exit(main())
