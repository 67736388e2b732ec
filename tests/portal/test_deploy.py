"""Production settings pass Django's deployment checks, bad environments fail at start, and
compose.yaml and bin/run-production describe the same topology."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DJANGO_SERVICES = ("web", "beat", "worker")
PROCESS_ENV = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS", "SPARK_MASTER_URL",
               "HTTPS")


def production_env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "HTTPS", "SECRET_KEY"}}
    env.update(
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/streamgate"),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        SECRET_KEY=secrets.token_urlsafe(45),  # 60 characters
        ALLOWED_HOSTS="streamgate.example.com",
        HTTPS="true",
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def manage(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=production_env(**env), capture_output=True, text=True, timeout=120,
    )


def test_deploy_check_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_deploy_check_warns_without_https():
    # Guards the test above against passing vacuously: plain http must be flagged.
    result = manage("check", "--deploy", "--fail-level", "WARNING", HTTPS=None)
    assert result.returncode != 0
    assert "security.W008" in result.stderr + result.stdout


def test_missing_secret_key_with_database_url_fails_fast():
    result = manage("check", SECRET_KEY=None)
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DATABASE_URL is set" in result.stderr


def test_bad_boolean_fails_fast():
    result = manage("check", DEBUG="perhaps")
    assert result.returncode != 0
    assert "DEBUG" in result.stderr


@pytest.mark.parametrize("size", ["0", "many"])
def test_bad_pool_size_fails_fast(size):
    result = manage("check", STREAMGATE_DB_POOL_SIZE=size)
    assert result.returncode != 0
    assert f"STREAMGATE_DB_POOL_SIZE='{size}' must be a whole number" in result.stderr


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_runs_every_django_process_from_one_image():
    services = compose()["services"]
    assert {"web", "beat", "worker", "spark-master", "spark-worker"} <= set(services)
    images = {services[name]["image"] for name in (*DJANGO_SERVICES, "spark-master",
                                                   "spark-worker")}
    assert len(images) == 1
    for name in DJANGO_SERVICES:
        assert set(PROCESS_ENV) <= set(services[name]["environment"]), name


def test_run_production_starts_the_compose_commands():
    script = (ROOT / "bin" / "run-production").read_text()
    services = compose()["services"]
    for name in ("beat", "worker"):
        assert " ".join(services[name]["command"]) in script, name
    web = " ".join(services["web"]["command"])
    assert "uvicorn portal.asgi:application" in web and "uvicorn portal.asgi:application" in script
    for variable in PROCESS_ENV:
        assert variable in script, variable
    assert subprocess.run(["bash", "-n", str(ROOT / "bin" / "run-production")]).returncode == 0


def test_compose_and_run_production_run_two_replicators():
    services = compose()["services"]
    replicators = [name for name, service in services.items()
                   if service.get("command") == ["streamgate", "replicator", "run"]]
    assert len(replicators) == 2, replicators
    script = (ROOT / "bin" / "run-production").read_text()
    assert "REPLICATORS=${REPLICATORS:-2}" in script
    assert 'start "replicator-$i" streamgate replicator run' in script


def test_compose_and_run_production_start_a_kafka_listener():
    kafka = compose()["services"]["kafka"]
    assert kafka["command"][:3] == ["streamgate", "kafka", "run"]
    assert "9092:9092" in kafka["ports"]
    assert set(PROCESS_ENV) <= set(kafka["environment"])
    script = (ROOT / "bin" / "run-production").read_text()
    assert 'streamgate kafka run -listen "$KAFKA_LISTEN"' in script
    assert "KAFKA_LISTEN=${KAFKA_LISTEN:-127.0.0.1:9092}" in script


def test_compose_runs_the_replicated_group_and_points_every_process_at_it():
    """Three etcd, three PostgreSQL members under Patroni (a strict synchronous standby), a
    Redis master and replica, three sentinels, each on a volume of its own; every streamgate
    process reaches PostgreSQL by libpq's multi-host form and Redis through the sentinels."""
    services = compose()["services"]
    group = {name for name in services if name.split("-")[0] in (
        "etcd", "pg", "redis", "sentinel")}
    assert group == {"etcd-1", "etcd-2", "etcd-3", "pg-1", "pg-2", "pg-3", "redis-1",
                     "redis-2", "sentinel-1", "sentinel-2", "sentinel-3"}
    for name in group:
        assert services[name]["volumes"] == [f"{name}:" + services[name]["volumes"][0]
                                             .split(":", 1)[1]], name
    assert {services[f"pg-{i}"]["environment"]["PATRONI_NAME"] for i in (1, 2, 3)} == {
        "pg-1", "pg-2", "pg-3"}
    patroni = yaml.safe_load((ROOT / "deploy" / "ha" / "patroni.yml").read_text())
    dcs = patroni["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] and dcs["synchronous_mode_strict"]
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    assert "replicaof redis-1 6379" in " ".join(services["redis-2"]["command"])
    for name, service in services.items():
        env = service.get("environment", {})
        if "DATABASE_URL" in env:
            assert "@pg-1:5432,pg-2:5432,pg-3:5432/" in env["DATABASE_URL"], name
            assert "?target_session_attrs=read-write&" in env["DATABASE_URL"], name
            assert env["REDIS_URL"].startswith(
                "sentinel://sentinel-1:26379,sentinel-2:26379,sentinel-3:26379/"), name
