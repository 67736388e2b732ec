"""README.md's "first five minutes", run as written against what `make run` starts: the same
commands as its recipe (migrate, collectstatic, ensureoperator, demoscene, runembedded --demo)
on a fresh data directory, then the portal signed in to with the password ensureoperator
printed, the command-line section's shell block, the kcat block and the confluent-kafka
snippet, each taken from the README itself. The only changes to the text: the ports (free
ones, not 8000 and 9092, which a developer's own `make run` may hold; STREAMGATE_URL tells
`streamgate` the portal's), the printed password
in place of PASSWORD, and the snippet's `token` bound to the token the shell block got."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import requests

from tests.broker.conftest import free_port
from tests.broker.embedded import manage, wait_log, wait_portal
from tests.workers.conftest import ROOT

pytestmark = pytest.mark.slow
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README's text from the heading `title` to the next heading of its level or above."""
    start = README.index(title)
    level = len(title.split()[0])  # "###": 3
    rest = README[start:]
    end = re.search(rf"\n#{{1,{level}}} ", rest)
    return rest[: end.start()] if end else rest


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


class Site(NamedTuple):
    web: int
    kafka: int
    password: str


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Site]:
    """`make run` on a fresh data directory: its recipe's commands, its ports made free."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "STREAMGATE_ADMIN_USER",
                        "STREAMGATE_ADMIN_PASSWORD", "STREAMGATE_TOKEN")}
    env["STREAMGATE_DATA_DIR"] = str(tmp_path / "var")
    manage(env, "migrate", "--no-input")
    manage(env, "collectstatic", "--no-input", "--verbosity", "0")
    created = manage(env, "ensureoperator")
    assert "created operator account admin (admin of tenant default)" in created
    password = re.search(r"^password: (\S+)  \(shown only now: note it\)$", created,
                         re.M).group(1)
    manage(env, "demoscene")
    web, kafka = free_port(), free_port()
    log_path = tmp_path / "run.log"
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runembedded", "--host", "127.0.0.1", "--port",
             str(web), "--kafka", f"127.0.0.1:{kafka}", "--demo"], cwd=ROOT, env=env,
            stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_log(log_path, "kafka listener ready", server)
            wait_portal(web, server)
            yield Site(web, kafka, password)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert "database is locked" not in log_path.read_text()


def as_written(text: str, site: Site) -> str:
    return (text.replace("127.0.0.1:8000", f"127.0.0.1:{site.web}")
            .replace("127.0.0.1:9092", f"127.0.0.1:{site.kafka}")
            .replace("admin:PASSWORD", f"admin:{site.password}"))


def run_shell(script: str, site: Site) -> subprocess.CompletedProcess[str]:
    """The script in bash, stopping at the first failing command. `streamgate` finds the
    portal at its default address, port 8000, unless STREAMGATE_URL says the free port."""
    env = {k: v for k, v in os.environ.items() if k != "STREAMGATE_TOKEN"}
    env["STREAMGATE_URL"] = f"http://127.0.0.1:{site.web}"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done


def sign_in(site: Site) -> requests.Session:
    """Section 1: the operator signs in to the portal with the printed password."""
    browser = requests.Session()
    login = f"http://127.0.0.1:{site.web}/login/"
    form = browser.get(login, timeout=30).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    answer = browser.post(login, data={"csrfmiddlewaretoken": token, "username": "admin",
                                       "password": site.password},
                          headers={"Referer": login}, timeout=30)
    assert answer.status_code == 200 and answer.url.endswith(f":{site.web}/"), answer.url
    return browser


def test_the_first_five_minutes_as_the_readme_tells_them(make_run: Site):
    site = make_run
    overview = sign_in(site).get(f"http://127.0.0.1:{site.web}/", timeout=30).text
    assert "/mapr/sanfrancisco/activity" in overview
    [cli] = blocks(section("### 2. The command line"), "sh")
    kafka = section("### 3. A Kafka client")
    [kcat] = blocks(kafka, "sh")
    [snippet] = blocks(kafka, "python")
    cursors = re.search(r"`(streamgate stream cursor list [^`]+)`", kafka).group(1)
    # A reader types this a while after `make run` started: by then the demo's replica has
    # its first messages (a loaded machine may take longer than this test takes to get here).
    signing_in = "\n".join(cli.splitlines()[:3])
    replicated = ("for _ in $(seq 120); do streamgate consume -path /mapr/newyork/activity:clicks"
                  " -limit 1 | grep -q value && break; sleep 0.5; done")
    # The snippet reads the token the shell exported; it runs after kcat, as a reader would.
    script = "\n".join([
        as_written(signing_in, site), replicated, as_written(cli, site),
        "echo '--- kcat'", as_written(kcat, site),
        "echo '--- python'", f"{sys.executable} - <<'PY'\nimport os\n"
        f"token = os.environ['STREAMGATE_TOKEN']\n{as_written(snippet, site)}PY",
        "echo '--- cursors'", cursors])
    out = run_shell(script, site).stdout
    cli_out, rest = out.split("--- kcat\n")
    kcat_out, rest = rest.split("--- python\n")
    python_out, cursor_out = rest.split("--- cursors\n")
    lines = [json.loads(line) for line in cli_out.splitlines() if line.startswith("{")]
    produced = [m for m in lines if "value" not in m]
    values = [m["value"] for m in lines if "value" in m]
    assert len(produced) == 3 and {"partition", "offset"} == set(produced[0])
    assert sorted(values[:3]) == ["one", "three", "two"]  # greetings, as produced
    assert 3 < len(values) <= 8 and all('"user": ' in v for v in values[3:])  # the replica's
    assert re.search(r"^newyork +/mapr/newyork/activity .*REPLICA_STATE_REPLICATING", cli_out,
                     re.M)  # the demo's replica, listed
    assert kcat_out.splitlines() == ["hello"]  # what the kcat producer wrote, read back
    assert python_out.strip() == "b'hello'"
    assert "billing" in cursor_out and "orders" in cursor_out


def test_the_readme_snippets_are_found_where_the_test_takes_them():
    """Guards the extraction: a README rewritten without a block fails here by name, not as
    an empty script passing."""
    assert "streamgate produce" in blocks(section("### 2. The command line"), "sh")[0]
    kafka = section("### 3. A Kafka client")
    assert "kcat" in blocks(kafka, "sh")[0] and "Consumer" in blocks(kafka, "python")[0]
