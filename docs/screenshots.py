"""Screenshots of the portal for docs/screenshots/, taken from the demo scene `make run` sets
up: `make screenshots` (Debian's chromium through Playwright; nothing is downloaded).

It starts the embedded portal on a scratch data directory and a free port, registers a second
replica so the approvals page has a request to show, waits for the demo's messages to reach the
replica, and captures the overview (also on a phone and in dark mode), the topology with a
link's lag chart, the streams list, the stream page with its lag chart, its consumer groups and
messages tabs, one message's permalink, the approvals and audit pages, the set-up wizard (a
manual step and autosetup's live copy) and the jobs page."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
PASSWORD = "screenshots-only-password"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout


def prepare(env: dict) -> None:
    for command in (("migrate", "--no-input", "-v0"), ("collectstatic", "--no-input", "-v0"),
                    ("ensureoperator",), ("demoscene",)):
        manage(env, *command)
    # A pending request for the approvals page: newyork/audit asks for sanfrancisco/activity.
    manage(env, "shell", "-c", (
        "from django.contrib.auth.models import User\n"
        "from replication.models import Stream\n"
        "from replication.services import replica_add, stream_create\n"
        "admin = User.objects.get(username='admin')\n"
        "src = Stream.objects.get(path='/mapr/sanfrancisco/activity')\n"
        "dst = stream_create(actor=admin, path='/mapr/newyork/audit')\n"
        "replica_add(actor=admin, source=src, replica=dst)\n"
        # A consumer group for the groups tab: it committed the start of the first topic.
        "from replication.services.cursors import cursor_commit\n"
        "topic = src.topics.order_by('name').first()\n"
        "if topic is not None:\n"
        "    cursor_commit(actor=admin, stream=src, group='billing', topic=topic.name,\n"
        "                  partition=0, offset=0)\n"))


def serve(env: dict, port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "manage.py", "runembedded", "--port", str(port),
                               "--demo"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            requests.get(f"http://127.0.0.1:{port}/login/", timeout=1)
            return server
        except requests.ConnectionError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the portal did not start")


def capture(base: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        time.sleep(3)  # let the trickle producer's messages reach the replica
        shots = {"overview": "/", "approvals": "/approvals/", "streams": "/streams/",
                 "audit": "/audit/"}
        for name, path in shots.items():
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
        topology(page, base)
        views(browser, base)
        page.goto(f"{base}/streams/")
        page.get_by_role("link", name="/mapr/sanfrancisco/activity", exact=True).first.click()
        page.wait_for_load_state("networkidle")
        # The recorder samples every 5 s: wait for a few points on the chart.
        page.wait_for_function("() => { const s = document.querySelector("
                               "'.lag-chart svg.messages'); return s && +s.dataset.points >= 4; }",
                               timeout=60_000)
        page.screenshot(path=str(OUT / "stream.png"), full_page=True)
        wizard(page, base)
        jobs(page, base)
        browser.close()


def topology(page, base: str) -> None:  # type: ignore[no-untyped-def]
    """The topology, with the first link's lag chart open beside it."""
    page.goto(f"{base}/topology/")
    page.wait_for_selector('#topology[data-ready="1"]')
    page.evaluate("() => { const e = streamgateTopology.state.cy.edges()[0];"
                  " if (e) { e.emit('tap'); } }")
    time.sleep(1)
    page.screenshot(path=str(OUT / "topology.png"), full_page=True)


def views(browser, base: str) -> None:  # type: ignore[no-untyped-def]
    """The stream's groups and messages tabs; the overview on a phone and in dark mode."""
    for name, options in (("overview-phone", {"viewport": {"width": 390, "height": 844}}),
                          ("overview-dark", {"viewport": {"width": 1280, "height": 900},
                                             "color_scheme": "dark"})):
        page = browser.new_page(**options)
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUT / f"{name}.png"), full_page=name == "overview-phone")
        if name == "overview-dark":
            page.goto(f"{base}/streams/")
            page.get_by_role("link", name="/mapr/sanfrancisco/activity", exact=True).first.click()
            stream_url = page.url
            for tab, path in (("groups", "groups/"), ("messages", "messages/")):
                page.emulate_media(color_scheme="light")
                page.goto(stream_url + path)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(OUT / f"{tab}.png"), full_page=True)
            page.locator("#messages a.permalink").first.click()  # one message, in full
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(OUT / "message.png"), full_page=True)
        page.close()


def submit_step(page, then: int) -> None:  # type: ignore[no-untyped-def]
    """Submit the wizard's step and wait for screen `then`: a second click must not land on
    the page the first one is still leaving, and a refusal is said, not waited out."""
    with page.expect_navigation():
        page.click("#step-form button[type=submit]")
    if page.locator(f'#wizard[data-step="{then}"]').count() == 0:
        said = page.locator(".field-error, .messages").all_inner_texts()
        raise RuntimeError(f"the wizard did not reach step {then}: {said or page.url}")


def wizard(page, base: str) -> None:  # type: ignore[no-untyped-def]
    """The manual set-up at its third step (the replica list check), then autosetup's copy."""
    page.goto(f"{base}/setup/manual/")
    page.fill("#step-form input[name=source]", "/mapr/sanfrancisco/activity")
    page.fill("#step-form input[name=replica]", "/mapr/newyork/activity-manual")
    submit_step(page, 2)  # step 1: create the replica
    submit_step(page, 3)  # step 2: register the replica, paused
    page.wait_for_selector("#replica-list")
    page.screenshot(path=str(OUT / "wizard.png"), full_page=True)
    page.goto(f"{base}/setup/auto/")
    page.fill("#autosetup-form input[name=source]", "/mapr/sanfrancisco/activity")
    page.fill("#autosetup-form input[name=replica]", "/mapr/newyork/activity-auto")
    page.click("#autosetup-form button[type=submit]")
    page.wait_for_selector("#autosetup-status .job-progress")
    page.wait_for_selector("#replicating", timeout=180_000)
    page.screenshot(path=str(OUT / "autosetup.png"), full_page=True)


def jobs(page, base: str) -> None:  # type: ignore[no-untyped-def]
    """A diffstreams run next to autosetup's copy, then its result per partition."""
    page.goto(f"{base}/jobs/")
    page.select_option("#start-job select[name=kind]", "diffstreams")
    page.fill("#start-job input[name=source]", "/mapr/sanfrancisco/activity")
    page.fill("#start-job input[name=destination]", "/mapr/newyork/activity")
    page.click("#start-job button[type=submit]")
    page.wait_for_selector('#job-card [data-field="state"]:text-matches("SUCCEEDED|FAILED")',
                           timeout=180_000)
    page.screenshot(path=str(OUT / "job.png"), full_page=True)
    page.goto(f"{base}/jobs/")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(OUT / "jobs.png"), full_page=True)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as data:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.update(STREAMGATE_DATA_DIR=data, STREAMGATE_ADMIN_PASSWORD=PASSWORD)
        prepare(env)
        port = free_port()
        server = serve(env, port)
        try:
            capture(f"http://127.0.0.1:{port}")
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"screenshots in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
