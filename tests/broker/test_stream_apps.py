"""Stream-processing applications run unchanged against the listener (issue 31), each in the
apps' own environment (pyproject's `apps` extra: quixstreams caps confluent-kafka below the
version the test extra runs), as a subprocess against a real listener: a quixstreams
application with a stateful count and processing_guarantee="exactly-once", killed -9 again
and again while input flows, whose output read with read_committed holds each result exactly
once and whose state survives every restart from its compacted changelog; a faust-streaming
application whose in-memory Table comes back from its changelog after a kill -9."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from replication.models import Topic
from replication.services.defaultstreams import default_stream_set
from replication.services.transactions import topic_transactions
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
APPS = Path(__file__).parent / "apps"
KEYS = [f"w{i}" for i in range(5)]


def apps_python() -> str:
    """The interpreter of the apps' environment, made from pyproject's `apps` extra the first
    time (var/apps-venv; STREAMGATE_APPS_PYTHON names another)."""
    if given := os.environ.get("STREAMGATE_APPS_PYTHON"):
        return given
    venv = ROOT / "var" / "apps-venv"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["apps"]
    if not marker.exists() or marker.read_text() != "\n".join(wanted):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], check=True,
                       timeout=600)
        marker.write_text("\n".join(wanted))
    return str(python)


@pytest.fixture
def app_stream(owner, settings):
    settings.STORE_LAYOUT = "batches"  # compacted changelogs need a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="apps"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    default_stream_set(actor=owner, cluster="apps", path=stream.path)
    store_for(stream.cluster)  # made here, in the batch layout, before the listener opens it
    return stream


class App:
    """One application run as a subprocess, restarted after each kill."""

    def __init__(self, kafka, script: str, workdir: Path) -> None:
        self.python, self.script, self.workdir = apps_python(), APPS / script, workdir
        self.env = {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap,
                    "KAFKA_USERNAME": kafka.username, "KAFKA_PASSWORD": kafka.password}
        self.process: subprocess.Popen | None = None
        self.runs = 0

    def start(self, state_dir: Path) -> None:
        self.runs += 1
        log = (self.workdir / f"run-{self.runs}.log").open("ab")
        self.process = subprocess.Popen(
            [self.python, str(self.script), *self.args(state_dir)], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, cwd=state_dir if self.script.stem == "faust_tally" else None)

    def args(self, state_dir: Path) -> list[str]:
        if self.script.stem == "faust_tally":  # a worker, its data directory in state_dir
            return ["worker", "-l", "info", "--without-web"]
        return [str(state_dir)]

    def kill(self) -> None:
        assert self.process is not None
        assert self.process.poll() is None, self.logs()
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.workdir.glob("run-*.log")))


def feed(kafka, count: int, done: threading.Event) -> None:
    producer = Producer(kafka.confluent(**{"enable.idempotence": True, "linger.ms": 5}))
    for n in range(count):
        producer.produce("words", json.dumps({"n": n}).encode(), KEYS[n % len(KEYS)])
        if n % 10 == 9:  # input flows through every kill: about 12 s of it
            producer.flush(30)
            time.sleep(0.3)
    assert producer.flush(30) == 0
    done.set()


def committed_output(kafka, expected: int, timeout: float) -> list[tuple[str, dict]]:
    consumer = Consumer(kafka.confluent(**{
        "group.id": f"check-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    consumer.subscribe(["counts"])
    got: list[tuple[str, dict]] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=1):
            if m.error() is None:
                got.append((m.key().decode(), json.loads(m.value())))
    quiet = time.monotonic() + 3  # anything past the expected would be a duplicate
    while time.monotonic() < quiet:
        got += [(m.key().decode(), json.loads(m.value()))
                for m in consumer.consume(500, timeout=0.5) if m.error() is None]
    consumer.close()
    return got


def diagnose(kafka, stream, group: str) -> str:
    """What a failure message needs: the group's committed input offset, and each topic's
    read_committed end, last stable offset and open transactions."""
    consumer = Consumer(kafka.confluent(**{"group.id": group,
                                           "isolation.level": "read_committed"}))
    out = [str(consumer.committed([TopicPartition("words", 0)], timeout=10))]
    for topic in stream.topics.order_by("name"):
        ends = consumer.get_watermark_offsets(TopicPartition(topic.name, 0), timeout=10)
        found = [(p.last_stable_offset, p.open) for p in topic_transactions(topic=topic)]
        out.append(f"{topic.name} {topic.policy}: {ends} {found}")
    consumer.close()
    return "\n".join(out)


def test_a_quixstreams_exactly_once_count_survives_kill_9(kafka, app_stream, tmp_path):
    count, kills = 400, 3
    app = App(kafka, "quix_counts.py", tmp_path)
    fed = threading.Event()
    feeder = threading.Thread(target=feed, args=(kafka, count, fed), daemon=True)
    try:
        app.start(tmp_path / "state-0")
        feeder.start()
        for kill in range(kills):
            time.sleep(random.uniform(3, 5))
            app.kill()
            app.start(tmp_path / f"state-{kill + 1}")  # a fresh disk: state from the changelog
        got = committed_output(kafka, count, timeout=45)
        why = diagnose(kafka, app_stream, "counter")
    finally:
        app.stop()
    assert fed.is_set()
    per_key: dict[str, list[dict]] = defaultdict(list)
    for key, value in got:
        per_key[key].append(value)
    for i, key in enumerate(KEYS):
        ns = list(range(i, count, len(KEYS)))
        assert [v["n"] for v in per_key[key]] == ns, f"{why}\n{app.logs()}"  # each once, in order
        assert [v["count"] for v in per_key[key]] == list(range(1, len(ns) + 1))
    changelogs = Topic.objects.filter(stream=app_stream, name__startswith="changelog__")
    assert [t.policy for t in changelogs] == ["compact"]


def tallies(app: App) -> dict[str, int]:
    """The latest count per key the faust application printed in its current run (faust logs
    what its agents print)."""
    assert app.process is not None
    log = (app.workdir / f"run-{app.runs}.log").read_text(errors="replace")
    latest: dict[str, int] = {}
    for found in re.finditer(r'\{"key": "(\w+)", "count": (\d+)\}', log):
        latest[found[1]] = int(found[2])
    return latest


def wait_for(app: App, wanted: dict[str, int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while tallies(app) != wanted:
        assert app.process is not None and app.process.poll() is None, app.logs()
        assert time.monotonic() < deadline, f"{tallies(app)} != {wanted}\n{app.logs()}"
        time.sleep(0.5)


def wait_committed(kafka, group: str, topic: str, offset: int, timeout: float) -> None:
    consumer = Consumer(kafka.confluent(**{"group.id": group}))
    deadline = time.monotonic() + timeout
    try:
        while consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset < offset:
            assert time.monotonic() < deadline, f"{group} did not commit {topic} {offset}"
            time.sleep(0.5)
    finally:
        consumer.close()


def test_a_faust_table_is_recovered_from_its_changelog_after_a_restart(kafka, app_stream,
                                                                      tmp_path):
    app = App(kafka, "faust_tally.py", tmp_path)
    producer = Producer(kafka.confluent())
    try:
        app.start(tmp_path)
        for n in range(50):
            producer.produce("fwords", b"x", KEYS[n % len(KEYS)])
        assert producer.flush(30) == 0
        wait_for(app, dict.fromkeys(KEYS, 10), timeout=40)
        wait_committed(kafka, "tally", "fwords", 50, timeout=20)  # faust is at-least-once
        app.kill()  # the table lived in memory only: all that is left is its changelog
        app.start(tmp_path)
        producer.produce("fwords", b"x", KEYS[0])
        assert producer.flush(30) == 0
        # a ceiling, not the usual time: under load (load 9 beside the suite) the restarted
        # worker waited out the killed member's session and started in 40 s. The table goes on
        # from its changelog's 10 (a reset one would count 1); faust is at-least-once, so a
        # rebalance as the killed member's session ends may count the new message twice (seen
        # once in CI: 12).
        deadline = time.monotonic() + 90
        while tallies(app).get(KEYS[0], 0) < 11:
            assert app.process is not None and app.process.poll() is None, app.logs()
            assert time.monotonic() < deadline, f"{tallies(app)}\n{app.logs()}"
            time.sleep(0.5)
        assert tallies(app)[KEYS[0]] in (11, 12), app.logs()
    finally:
        app.stop()
    changelog = Topic.objects.get(stream=app_stream, name="tally-counts-changelog")
    assert changelog.policy == "compact"
