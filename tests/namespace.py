"""A pytest plugin (pyproject's addopts), imported before Django's settings are: under
pytest-xdist each worker of each run gets Redis keys, channel groups and cache entries of its
own, as the test database is already its own (tests/conftest.py), so two workers (or two runs
on one machine) never see each other's gateways, leases or counters."""

import os

worker = os.environ.get("PYTEST_XDIST_WORKER")
if worker:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    os.environ["STREAMGATE_NAMESPACE"] = (
        f"{os.environ.get('STREAMGATE_NAMESPACE', '')}t{run}-{worker}:")
