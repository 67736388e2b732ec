import argparse
import sys

from bench.chaos.command import add_arguments, main

parser = argparse.ArgumentParser(prog="python -m bench.chaos",
                                 description="the chaos soak (bench/chaos/__init__.py)")
add_arguments(parser)
sys.exit(main(parser.parse_args()))
