"""librdkafka's own regression suite against a listener of the production stack.

`make conformance` builds librdkafka's test-runner once from the pinned snapshot
(../shared/vendor/librdkafka-<commit>.tar.gz, into var/conformance/), then for each way plain
topic names reach a stream (--names):
- listener: the listener runs with --defaultstream;
- tenant: the tenant's default stream is set (`tenant defaultstream set`), the listener has none;
starts a production-mode portal (uvicorn) on a scratch database and one Kafka listener
(`manage.py runkafka`), makes a tenant user, a cluster and a stream with 4 default partitions
and autocreate on, and runs each broker-facing test the way librdkafka's maintainers run it
against an existing cluster: `TESTS=NNNN test-runner -Q` with TEST_KAFKA_VERSION and a
test.conf naming the listener and SASL/PLAIN credentials (the user and a token).

It prints a line per test as it ends and a summary; each test's output is kept in
var/conformance/logs/<names>/NNNN.log and the results in var/conformance/results-<names>.json.
Exit status 0 only when every test run passed.

    python -m bench conformance                      # both name forms, the 87 tests
    python -m bench conformance --names tenant --tests 0001 0070
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.deployment import with_db
from bench.kafka import Listener
from bench.produce import ROOT, Portal, start_portal

COMMIT = "4c3b017c3de8"
TARBALL = ROOT.parent / "shared" / "vendor" / f"librdkafka-{COMMIT}.tar.gz"
WORK = ROOT / "var" / "conformance"
CLUSTER, STREAM = "conformance", "/mapr/conformance/rdk"
PARTITIONS = 4
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The broker-facing tests a Kafka 2.6-3.x cluster runs (no SSL, OAUTH, share groups,
# fetch-from-follower or mock-only tests).
TESTS = (
    "0001", "0002", "0003", "0005", "0007", "0008", "0011", "0012", "0013", "0014", "0015",
    "0017", "0018", "0019", "0020", "0021", "0022", "0026", "0028", "0029", "0030", "0031",
    "0033", "0034", "0035", "0036", "0039", "0040", "0041", "0042", "0044", "0045", "0046",
    "0047", "0048", "0049", "0050", "0051", "0053", "0054", "0055", "0056", "0057", "0059",
    "0060", "0061", "0062", "0063", "0065", "0067", "0069", "0070", "0073", "0074", "0075",
    "0082", "0083", "0084", "0085", "0086", "0089", "0090", "0091", "0092", "0093", "0094",
    "0099", "0102", "0106", "0107", "0109", "0110", "0111", "0112", "0113", "0114", "0116",
    "0118", "0120", "0122", "0125", "0127", "0130", "0132", "0137", "0140", "0153",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--names", choices=("listener", "tenant", "both"), default="both",
                        help="how plain topic names reach the stream (default: both, in turn)")
    parser.add_argument("--tests", nargs="+", default=TESTS, metavar="NNNN",
                        help="test numbers (default: the 87 broker-facing tests)")
    parser.add_argument("--subtests", nargs="+", default=None, metavar="NAME",
                        help="run each test once per sub-test NAME (librdkafka's SUBTESTS, a "
                             "substring of the sub-test's name, e.g. do_test_AlterConfigs), "
                             "each reported as NNNN:NAME: 0081-admin stops at its first "
                             "failing sub-test, so this is how each is judged on its own")
    parser.add_argument("--jobs", type=int, default=2, help="tests run at once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    parser.add_argument("--kafka-version", default="3.0.0", help="TEST_KAFKA_VERSION")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                        help="TEST_CONSUMER_GROUP_PROTOCOL")
    parser.add_argument("--source", type=Path, default=TARBALL, help="librdkafka's snapshot")
    parser.add_argument("--build", type=Path, default=WORK / f"librdkafka-{COMMIT}",
                        help="where the snapshot is unpacked and built (reused when built)")


# --- the test-runner ---------------------------------------------------------------------------


def build(source: Path, tree: Path) -> Path:
    """librdkafka's tests directory with test-runner built in it, under `tree` (built once)."""
    runner = tree / "librdkafka" / "tests" / "test-runner"
    if runner.exists():
        return runner.parent
    if not source.exists():
        raise SystemExit(f"librdkafka's snapshot {source} is missing: give --source PATH")
    tree.mkdir(parents=True, exist_ok=True)
    print(f"building librdkafka's test-runner from {source.name} (a few minutes, once)",
          flush=True)
    with tarfile.open(source) as archive:
        archive.extractall(tree, filter="data")
    checkout = tree / "librdkafka"
    jobs = f"-j{os.cpu_count() or 1}"
    for step in (["./configure", "--disable-ssl", "--disable-gssapi", "--disable-curl"],
                 ["make", jobs, "libs"], ["make", jobs, "-C", "tests", "test-runner"]):
        done = subprocess.run(step, cwd=checkout, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(step)} failed:\n{done.stdout[-2000:]}"
                             f"{done.stderr[-2000:]}")
    return runner.parent


@dataclass
class Result:
    test: str
    passed: bool
    seconds: float
    why: str  # the runner's reason for its first failure, or "" when passed


def _why(output: str) -> str:
    """The runner's reason for the first failure (its line after "TEST FAILURE"), or the last
    line it printed."""
    lines = [line.strip() for line in ANSI.sub("", output).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.endswith("TEST FAILURE") and index + 2 < len(lines):
            return f"{lines[index + 1]} {lines[index + 2]}"[:300]
    return lines[-1][:300] if lines else "no output"


def run_test(tests_dir: Path, test: str, env: dict[str, str], logs: Path,
             timeout: float) -> Result:
    """Run `test` (NNNN, or NNNN:SUBTEST for one sub-test of it)."""
    started = time.monotonic()
    log = logs / f"{test.replace(':', '-')}.log"
    number, _, subtest = test.partition(":")
    chosen = {"TESTS": number, **({"SUBTESTS": subtest} if subtest else {})}
    try:
        done = subprocess.run(["./test-runner", "-Q"], cwd=tests_dir, env={**env, **chosen},
                              capture_output=True, text=True, errors="replace", timeout=timeout)
        output, passed = done.stdout + done.stderr, done.returncode == 0
    except subprocess.TimeoutExpired as expired:  # its output comes as bytes, text=True or not
        caught = b"".join(part or b"" for part in (expired.stdout, expired.stderr))
        output = f"{caught.decode(errors='replace')}\nTIMED OUT after {timeout:.0f} s"
        passed = False
    log.write_text(output)
    return Result(test, passed, time.monotonic() - started, "" if passed else _why(output))


# --- the listener under test -------------------------------------------------------------------


def prepare(portal: Portal, token: str, names: str) -> None:
    from streamgate.client import Client

    client = Client(portal.url, token)
    client.call("cluster create", {"name": CLUSTER})
    client.call("stream create", {"path": STREAM, "defaultpartitions": PARTITIONS,
                                  "autocreate": True})
    if names == "tenant":
        client.call("tenant defaultstream set", {"cluster": CLUSTER, "path": STREAM})


def test_conf(path: Path, port: int, token: str) -> Path:
    path.write_text("\n".join([
        f"metadata.broker.list=127.0.0.1:{port}",
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanisms=PLAIN",
        "sasl.username=bench",
        f"sasl.password={token}",
        "",
    ]))
    return path


def _runs(args: argparse.Namespace) -> list[str]:
    if not args.subtests:
        return list(args.tests)
    return [f"{test}:{sub}" for test in args.tests for sub in args.subtests]


def run_names(tests_dir: Path, names: str, args: argparse.Namespace) -> list[Result]:
    logs = WORK / "logs" / names
    logs.mkdir(parents=True, exist_ok=True)
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    portal = Portal(with_db(server, "postgres"), "uvicorn")  # it makes a scratch database
    listener = None
    try:
        token = start_portal(portal)
        prepare(portal, token, names)
        extra = ["--defaultstream", STREAM] if names == "listener" else []
        listener = Listener(portal.env, extra)
        libraries = [str(tests_dir.parent / "src"), str(tests_dir.parent / "src-cpp")]
        env = {**os.environ, "LD_LIBRARY_PATH": ":".join(libraries),
               "TEST_KAFKA_VERSION": args.kafka_version,
               "TEST_CONSUMER_GROUP_PROTOCOL": args.group_protocol,
               "RDKAFKA_TEST_CONF": str(test_conf(logs / "test.conf", listener.port, token))}
        results = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            runs = [pool.submit(run_test, tests_dir, t, env, logs, args.timeout)
                    for t in _runs(args)]
            for run in concurrent.futures.as_completed(runs):
                result = run.result()
                results.append(result)
                mark = "pass" if result.passed else "FAIL"
                print(f"  [{names}] {result.test} {mark} {result.seconds:5.0f} s  {result.why}",
                      flush=True)
        return sorted(results, key=lambda r: r.test)
    finally:
        if listener is not None:
            listener.stop(keep_log=logs / "listener.log")
        portal.stop()


def main(args: argparse.Namespace) -> int:
    tests_dir = build(args.source, args.build)
    every = ("listener", "tenant") if args.names == "both" else (args.names,)
    failed = 0
    summary = []
    for names in every:
        print(f"plain names through the {names}'s default stream: {len(args.tests)} tests",
              flush=True)
        results = run_names(tests_dir, names, args)
        passed = [r.test for r in results if r.passed]
        failed += len(results) - len(passed)
        (WORK / f"results-{names}.json").write_text(json.dumps(
            {"commit": COMMIT, "date": time.strftime("%Y-%m-%d"), "names": names,
             "group_protocol": args.group_protocol, "results": [asdict(r) for r in results]},
            indent=1))
        summary.append(f"{names}: {len(passed)} of {len(results)} passed; failed: "
                       f"{' '.join(r.test for r in results if not r.passed) or 'none'}")
    print(f"\nlibrdkafka {COMMIT}, TEST_KAFKA_VERSION={args.kafka_version}, "
          f"group protocol {args.group_protocol}, {time.strftime('%Y-%m-%d')}")
    print("\n".join(summary))
    return 1 if failed else 0

