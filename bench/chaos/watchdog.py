"""The soak's watchdog (issue 26): every step (a fault injected or undone, its recovery, a
failover or failback, the soak's own phases) has a deadline, 60 s unless the step says
otherwise, and the whole run one more (its `--seconds` plus a margin). Past a deadline the
watchdog prints the step, what the databases' backends are doing and who blocks whom
(pg_stat_activity, pg_blocking_pids, the locks they wait for) and every thread's stack of this
process, stops every process the soak started, and ends the run with a FAILED line: the soak
always ends by itself, and a hang says where it is."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass

DEADLINE = 60.0  # seconds, for a step that does not say otherwise
QUERY_CHARS = 300  # of each backend's query text
STACK_FRAMES = 14  # innermost frames of each thread

# Client backends of one database that are not idle, with the backends blocking them and the
# locks they wait for; "idle in transaction" is kept: such a session holds its locks.
ACTIVITY = r"""
SELECT a.pid, pg_blocking_pids(a.pid), coalesce(a.state, ''),
       coalesce(a.wait_event_type || '/' || a.wait_event, ''),
       round(extract(epoch FROM now() - a.xact_start)::numeric, 1),
       round(extract(epoch FROM now() - a.state_change)::numeric, 1),
       coalesce(a.application_name, ''), coalesce(a.client_port, 0),
       (SELECT string_agg(l.locktype || coalesce(' ' || l.relation::regclass::text, '')
                          || ' ' || l.mode, ', ')
          FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted),
       left(regexp_replace(a.query, '\s+', ' ', 'g'), %(chars)s)
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
   AND a.backend_type = 'client backend' AND a.state IS DISTINCT FROM 'idle'
 ORDER BY a.xact_start NULLS LAST, a.pid
"""


class WatchdogExpired(BaseException):
    """A step passed its deadline; the message is the watchdog's report. Not an Exception:
    the soak's `except Exception` (a failback attempt retried, a store not readable) must not
    swallow it."""


@dataclass(frozen=True)
class Step:
    label: str
    seconds: float  # its deadline, from `started`
    started: float  # time.monotonic()

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def age(self, now: float) -> float:
        return now - self.started


class Watchdog:
    """Deadlines for the soak's steps, watched by a thread of its own.

    `stop` ends every process and server the soak started (it must not wait on anything a hang
    can hold); `exit` ends the run (os._exit in `python -m bench.chaos`: the main thread may
    sit in a call that never returns). With `exit` returning instead (the tests), the main
    thread's next step raises WatchdogExpired."""

    def __init__(self, *, say: Callable[[str], None], stop: Callable[[], None],
                 exit: Callable[[int], None], every: float = 0.2) -> None:
        self.say, self.stop, self.exit, self.every = say, stop, exit, every
        self.steps: dict[int, Step] = {}
        self.databases: list[tuple[str, str]] = []  # (label, libpq URL) to read on expiry
        # The soak's processes, label -> pid: a backend's client port names its process.
        self.processes: Callable[[], dict[str, int]] = dict
        self.report: str = ""  # set once a deadline passed
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._firing = False
        self._fired = threading.Event()  # the report is written
        self._done = threading.Event()  # the processes stopped, `exit` returned
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # --- deadlines -------------------------------------------------------------------------------

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def arm(self, label: str, seconds: float = DEADLINE, *, started: float | None = None) -> int:
        self.check()
        token = next(self._ids)
        with self._lock:
            self.steps[token] = Step(label, seconds,
                                     time.monotonic() if started is None else started)
        return token

    def disarm(self, token: int) -> None:
        with self._lock:
            self.steps.pop(token, None)
        self.check()

    @contextlib.contextmanager
    def step(self, label: str, seconds: float = DEADLINE) -> Iterator[None]:
        token = self.arm(label, seconds)
        try:
            yield
        finally:
            self.disarm(token)

    def check(self) -> None:
        """In the main thread, after the watchdog fired: end what it was doing, once the
        watchdog has stopped everything (with os._exit, never: the main thread's own teardown
        must not race the watchdog's)."""
        if self._fired.is_set() and threading.current_thread() is threading.main_thread():
            self._done.wait()
            raise WatchdogExpired(self.report)

    def _watch(self) -> None:
        while not self._closed.wait(self.every):
            now = time.monotonic()
            with self._lock:
                late = [s for s in self.steps.values() if s.deadline <= now]
            if late:
                self.fire(min(late, key=lambda s: s.deadline))
                return

    # --- expiry ----------------------------------------------------------------------------------

    def fire(self, step: Step, detail: str = "") -> None:
        """Report `step` as stuck, stop everything, end the run; once, whoever calls it."""
        with self._lock:
            if self._firing:
                return
            self._firing = True
        now = time.monotonic()
        owners = port_owners({"the soak": os.getpid(), **self.processes()})
        self.report = "\n".join([
            f"WATCHDOG: step {step.label!r} passed its deadline of {step.seconds:g} s "
            f"(running {step.age(now):.1f} s)", *([detail] if detail else []),
            self.running(now), *(activity(label, url, owners) for label, url in self.databases),
            thread_stacks()])
        self._fired.set()
        self.say(self.report)
        try:
            self.stop()
        except Exception as error:  # stopping is best effort: the exit below must come
            self.say(f"WATCHDOG: stopping the soak's processes failed: {error!r}")
        self.say(f"FAILED: the soak's step {step.label!r} did not finish within "
                 f"{step.seconds:g} s (watchdog)")
        sys.stdout.flush()
        self.exit(1)
        self._done.set()
        self.check()

    def expire(self, label: str, seconds: float, started: float, detail: str = "") -> None:
        """A deadline the caller watches itself (a fault's recovery, read in the main loop)."""
        self.fire(Step(label, seconds, started), detail)

    def running(self, now: float) -> str:
        with self._lock:
            steps = sorted(self.steps.values(), key=lambda s: s.started)
        return "steps running:\n" + "\n".join(
            f"  {s.label} ({s.age(now):.1f} s of {s.seconds:g} s)" for s in steps)


def activity(label: str, url: str, owners: dict[int, str] | None = None) -> str:
    """The backends of the database at `url` that are not idle, one line each: who blocks
    them, what they wait for, for how long, which process is their client (`owners`: client
    port -> process) and their query."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SET statement_timeout = '5s'")
            rows = conn.execute(ACTIVITY, {"chars": QUERY_CHARS}).fetchall()
    except Exception as error:  # the server down (a fault) or full: say so and go on
        return f"{label}: not readable ({type(error).__name__}: {str(error).strip()[:200]})"
    lines = [f"{label} (pg_stat_activity, not idle; pg_blocking_pids):"]
    for pid, blockers, state, wait, xact, since, app, port, waiting, query in rows:
        lines.append(
            f"  pid {pid}{f' blocked by {blockers}' if blockers else ''}: {state} {since} s"
            f"{f', transaction {xact} s' if xact is not None else ''}"
            f"{f', waits {wait}' if wait else ''}{f' for {waiting}' if waiting else ''}"
            f"{f', app {app}' if app else ''}{f', client port {port}' if port else ''}"
            f"{f' ({owners[port]})' if port in (owners or {}) else ''}"
            f"\n      {query}")
    return "\n".join(lines if rows else [f"{label}: no backend busy"])


def thread_stacks() -> str:
    """Every thread of this process with its innermost frames; threads with the same stack
    (a pool's idle workers) once, naming them all."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks: dict[tuple[str, ...], list[str]] = {}
    for ident, frame in sys._current_frames().items():
        stack = tuple(traceback.format_stack(frame)[-STACK_FRAMES:])
        stacks.setdefault(stack, []).append(f"{names.get(ident, '?')} ({ident})")
    lines = ["threads of the soak process:"]
    for stack, threads in stacks.items():
        lines.append(f"  thread{'s' if len(threads) > 1 else ''} {', '.join(threads)}:")
        lines += ["    " + entry.rstrip().replace("\n", "\n    ") for entry in stack]
    return "\n".join(lines)


def port_owners(pids: dict[str, int]) -> dict[int, str]:
    """Local TCP port -> the label of the process (of `pids`) holding that socket, read from
    Linux's /proc; empty where it cannot be read."""
    inodes: dict[str, str] = {}
    for label, pid in pids.items():
        with contextlib.suppress(OSError):
            for entry in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(entry.path)
                    if target.startswith("socket:["):
                        inodes[target[len("socket:["):-1]] = label
    owners: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    owners[int(fields[1].rsplit(":", 1)[1], 16)] = inodes[fields[9]]
    return owners
