"""A standalone Spark cluster on loopback: one master and one worker, started with pyspark's own
`bin/spark-class` as compose.yaml's spark-master and spark-worker services run them, on free
ports, with work and log directories of their own. The cluster tests, `python -m bench spark
--cluster` and the chaos soak (which kills the worker) share it. No Django here: it is plain
processes.

    cluster = start(cores=2)          # returns once the worker is registered with the master
    cluster.master_url                # spark://127.0.0.1:PORT, for SPARK_MASTER_URL
    cluster.client_environment        # SPARK_MASTER_URL and more, for the submitting process
    cluster.kill_worker()             # SIGKILL to the worker's process group: a node lost
    cluster.restart_worker()          # a fresh worker (new id) registered with the master
    cluster.stop()

The worker runs in a process group of its own, which its executors (and their Python workers)
join: killing the group is a machine going away, with nothing left running behind it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
START_TIMEOUT = 90.0  # seconds: two JVMs starting on a busy 2-core machine
# A worker that vanished without a word (no TCP reset) is dropped after this: Spark's 60 s
# default would keep a dead node's cores on offer for a minute; less than 30 s drops live
# workers whose heartbeats a loaded machine delays (seen at 10 s, load average 20 on 2 cores).
MASTER_OPTS = "-Dspark.worker.timeout=30 -Dspark.deploy.retainedApplications=200"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


class ClusterError(RuntimeError):
    pass


@dataclass
class Cluster:
    """A running master and worker; see the module's docstring."""

    root: Path
    cores: int = 2
    memory: str = "2g"
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    master: subprocess.Popen | None = None
    worker: subprocess.Popen | None = None
    worker_ui_port: int = 0
    workers_started: int = 0
    owns_root: bool = False

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def client_environment(self) -> dict[str, str]:
        """What a process submitting jobs here needs in its environment: the master, and the
        driver's address on loopback (by default Spark advertises the host's name or first
        address, which the loopback-bound driver does not listen on: executors could never
        connect back). compose.yaml's equivalent is the worker's hostname and
        SPARK_DRIVER_BIND."""
        return {"SPARK_MASTER_URL": self.master_url, "SPARK_LOCAL_IP": HOST}

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.master_ui_port}"

    @property
    def worker_ui_url(self) -> str:
        return f"http://{HOST}:{self.worker_ui_port}"

    # --- state, from the master's and the worker's JSON pages ---------------------------------

    def state(self) -> dict:
        """The master's /json/ page: workers, active and completed applications."""
        return _json(f"{self.ui_url}/json/")

    def alive_workers(self) -> list[dict]:
        try:
            return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        except OSError:
            return []

    def worker_state(self) -> dict:
        """The running worker's /json/ page: its executors (running and finished), by app."""
        return _json(f"{self.worker_ui_url}/json/")

    def executors_of(self, app_id: str) -> list[dict]:
        """The executors the running worker launched for an application, finished or not."""
        page = self.worker_state()
        return [e for e in page["executors"] + page["finishedexecutors"] if e["appid"] == app_id]

    # --- processes ----------------------------------------------------------------------------

    def _env(self, name: str) -> dict[str, str]:
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(logs),
                "SPARK_LOCAL_DIRS": str(self.root / "local"), "SPARK_MASTER_OPTS": MASTER_OPTS,
                "SPARK_NO_DAEMONIZE": "1", "SPARK_IDENT_STRING": name}

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = (self.root / "logs" / f"{name}.log").open("ab")
        with log:  # the child keeps its own descriptor
            # Its own process group: a worker's executors join it, and one signal ends all.
            return subprocess.Popen([str(SPARK_CLASS), *argv], env=self._env(name),
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start_master(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._env("master")
        self.master = self._spawn("master", [MASTER, "--host", HOST, "--port",
                                             str(self.master_port), "--webui-port",
                                             str(self.master_ui_port)])
        self._wait(lambda: "workers" in self.state(), "the master's web UI to answer")

    def start_worker(self) -> None:
        """A fresh worker, returned once the master lists it ALIVE."""
        self.workers_started += 1
        port, self.worker_ui_port = free_port(), free_port()
        work = self.root / f"work-{self.workers_started}"
        self.worker = self._spawn(f"worker-{self.workers_started}", [
            WORKER, "--host", HOST, "--port", str(port), "--webui-port",
            str(self.worker_ui_port), "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(work), self.master_url])
        self._wait(lambda: any(w["port"] == port for w in self.alive_workers()),
                   f"worker {self.workers_started} to register with the master")

    def kill_worker(self) -> None:
        """SIGKILL to the worker, its executors and their Python workers, as a node lost."""
        if self.worker is not None:
            _kill_group(self.worker)
            self.worker = None

    def restart_worker(self) -> None:
        self.kill_worker()
        self.start_worker()

    def stop(self) -> None:
        self.kill_worker()
        if self.master is not None:
            _kill_group(self.master)
            self.master = None
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def log(self, name: str) -> str:
        """A process's output ("master", "worker-1", ...), for a failing test's message."""
        path = self.root / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not _quietly(ready):
            for name, process in (("master", self.master), ("worker", self.worker)):
                if process is not None and process.poll() is not None:
                    raise ClusterError(f"the Spark {name} exited ({process.returncode}) while "
                                       f"waiting for {what}; see {self.root / 'logs'}")
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {START_TIMEOUT:.0f} s waiting for {what}; "
                                   f"see {self.root / 'logs'}")
            time.sleep(0.2)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(cores: int = 2, *, memory: str = "2g", root: Path | None = None) -> Cluster:
    """A master and one worker offering `cores` and `memory` to applications, under `root`
    (a fresh temporary directory, removed by stop(), if not given)."""
    owns = root is None
    cluster = Cluster(Path(root or tempfile.mkdtemp(prefix="sg-spark-")), cores=cores,
                      memory=memory, owns_root=owns)
    try:
        cluster.start_master()
        cluster.start_worker()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=20) as response:  # a loaded machine is slow
        return json.load(response)


def _quietly(ready: object) -> bool:
    try:
        return bool(ready())  # type: ignore[operator]
    except (OSError, ValueError, KeyError):  # not listening yet, or a page half written
        return False


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
