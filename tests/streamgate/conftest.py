"""The live-portal fixtures of test_cli.py, for the other CLI test modules."""

from tests.streamgate.test_cli import cli, clusters  # noqa: F401
