"""`python -m bench store [--messages N] [--runs R] [--url URL]`."""

import argparse
import sys

from bench import store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    store.add_arguments(sub.add_parser("store", help="message store append and read throughput"))
    args = parser.parse_args(argv)
    return store.main(args)


if __name__ == "__main__":
    sys.exit(main())
