"""docker-compose.yml and the Dockerfile, without a Docker engine: the compose file is
validated against the Compose Specification schema by check-jsonschema, then held to the
deployment's shape (db healthy → migrate once → api, all on the contract's settings)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from sqlalchemy.engine import make_url

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
CONTRACT_SETTINGS = {"TXMSG_DATABASE_URL", "TXMSG_TRANSACTION_TIMEOUT_SECONDS",
                     "TXMSG_CHECK_INTERVAL_SECONDS", "TXMSG_CHECK_MAX_TIMES",
                     "TXMSG_MAX_BODY_BYTES"}
KNOWN_SETTINGS = {f"TXMSG_{name.upper()}" for name in Settings.model_fields}


def check_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True, text=True, timeout=120, check=False)


ADMIN_TOKEN = "compose-test-admin-token-0123456789"


def _interpolate(text: str) -> str:
    """Compose's ``${VAR:-default}`` with no VAR set, and its required ``${VAR:?message}``
    with only TXMSG_ADMIN_TOKEN set."""
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{(\w+):\?[^}]*\}",
                  lambda m: ADMIN_TOKEN if m[1] == "TXMSG_ADMIN_TOKEN" else m[0], text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(_interpolate(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def txmsg_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run a txmsg image (the API's, or the ingestion's)."""
    images = {compose["services"]["migrate"]["image"], compose["services"]["ingest"]["image"]}
    return {name: s for name, s in compose["services"].items()
            if s.get("image") in images and "ha" not in s.get("profiles", ())}


@pytest.fixture(scope="module")
def ha_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services of the "ha" profile (docs/operations.md, "Scaling out and failover")."""
    return {name: s for name, s in compose["services"].items()
            if "ha" in s.get("profiles", ())}


def test_compose_file_follows_the_compose_specification() -> None:
    result = check_compose_schema(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_refuses_a_broken_compose_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("service_healthy", "service_healty"))
    result = check_compose_schema(broken)
    assert result.returncode != 0
    assert "service_healty" in result.stdout + result.stderr


def test_db_is_postgres_16_with_a_pg_isready_healthcheck(compose: dict[str, Any]) -> None:
    db = compose["services"]["db"]
    assert db["image"] == "postgres:16"
    test = db["healthcheck"]["test"]
    command = test[1:] if test[0] == "CMD" else shlex.split(test[1])
    assert command[0] == "pg_isready"


def test_migrate_runs_once_when_db_is_healthy(compose: dict[str, Any]) -> None:
    migrate = compose["services"]["migrate"]
    assert migrate["command"] == ["migrate"]
    assert migrate["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    assert "build" in migrate


def test_api_serves_after_migrate_completed(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    command = api["command"]
    assert command[:1] == ["serve"] and "--no-migrate" in command
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == "8080"
    assert api["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert api["ports"] == ["8080:8080"]
    probe = " ".join(api["healthcheck"]["test"])
    assert "http://127.0.0.1:8080/healthz" in probe


def test_optional_services_wait_for_migrate_and_sit_behind_profiles(
        compose: dict[str, Any]) -> None:
    for name, command in (("checker", ["checker"]), ("ingest", ["ingest", "--output"])):
        service = compose["services"][name]
        assert service["command"][:len(command)] == command
        assert service["profiles"]
        assert service["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}}


def test_every_txmsg_service_runs_on_the_contract_settings(
        compose: dict[str, Any], txmsg_services: dict[str, dict[str, Any]]) -> None:
    assert set(txmsg_services) == {"migrate", "api", "checker", "ingest"}
    db_env = compose["services"]["db"]["environment"]
    for name, service in txmsg_services.items():
        env = service["environment"]
        assert set(env) >= CONTRACT_SETTINGS, name
        assert set(env) <= KNOWN_SETTINGS, (name, set(env) - KNOWN_SETTINGS)
        # the values are ones Settings accepts, and the database is the db service's
        settings = Settings(**{k.removeprefix("TXMSG_").lower(): v for k, v in env.items()})
        url = make_url(settings.database_url)
        assert url.drivername == "postgresql+psycopg"
        assert (url.host, url.port, url.database, url.username, url.password) == (
            "db", 5432, db_env["POSTGRES_DB"], db_env["POSTGRES_USER"],
            db_env["POSTGRES_PASSWORD"])


def test_the_api_runs_with_access_control_from_a_required_admin_token(
        txmsg_services: dict[str, dict[str, Any]]) -> None:
    """The API listens on 0.0.0.0, which `txmsg serve` refuses without access control: its
    admin token comes from the environment (or .env), with no default in the file, and
    compose stops with a message if it is unset. Only the API holds it."""
    raw = COMPOSE.read_text()
    assert re.search(r"TXMSG_ADMIN_TOKEN: \$\{TXMSG_ADMIN_TOKEN:\?[^}]+\}", raw)
    assert "TXMSG_ALLOW_UNAUTHENTICATED" not in raw
    api = txmsg_services["api"]
    assert api["environment"]["TXMSG_ADMIN_TOKEN"] == ADMIN_TOKEN
    assert Settings(admin_token=api["environment"]["TXMSG_ADMIN_TOKEN"]).access_control
    holders = {name for name, service in txmsg_services.items()
               if "TXMSG_ADMIN_TOKEN" in service["environment"]}
    assert holders == {"api"}


def test_the_ha_profile_follows_patroni_behind_haproxy(
        ha_services: dict[str, dict[str, Any]]) -> None:
    members = ("etcd0", "etcd1", "etcd2")
    assert set(ha_services) == {*members, "pg0", "pg1", "ha-migrate", "api1", "api2", "haproxy"}
    for member in members:  # one etcd cluster of three: it keeps a quorum when one is lost
        command = ha_services[member]["command"]
        cluster = command[command.index("--initial-cluster") + 1]
        assert cluster == ",".join(f"{m}=http://{m}:2380" for m in members)
        assert command[command.index("--name") + 1] == member
    for node in ("pg0", "pg1"):
        env = ha_services[node]["environment"]
        assert env["PATRONI_NAME"] == node
        assert env["PATRONI_ETCD3_HOSTS"] == "etcd0:2379,etcd1:2379,etcd2:2379"
        assert ha_services[node]["build"] == "./deploy/patroni"
    for name in ("ha-migrate", "api1", "api2"):
        env = ha_services[name]["environment"]
        assert set(env) >= CONTRACT_SETTINGS and set(env) <= KNOWN_SETTINGS, name
        primary = make_url(env["TXMSG_DATABASE_URL"])
        assert primary.query["host"] == ("pg0:5432", "pg1:5432")
        assert primary.query["target_session_attrs"] == "read-write"
        assert make_url(env["TXMSG_READ_DATABASE_URL"]).query["target_session_attrs"] \
            == "prefer-standby"
    for name in ("api1", "api2"):
        assert ha_services[name]["environment"]["TXMSG_ADMIN_TOKEN"] == ADMIN_TOKEN
    proxy = ha_services["haproxy"]
    assert proxy["volumes"] == ["./deploy/haproxy:/usr/local/etc/haproxy:ro"]
    assert proxy["environment"]["TXMSG_API1"] == "api1:8080"
    assert proxy["environment"]["TXMSG_API2"] == "api2:8080"


def _stages() -> dict[str, list[tuple[str, str]]]:
    """The Dockerfile's instructions by stage (``FROM image AS name``), in order."""
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            if keyword.upper() == "FROM":
                current = stages.setdefault(rest.split()[-1], [])
            current.append((keyword.upper(), rest.strip()))
    return stages


def _runs(instructions: list[tuple[str, str]]) -> str:
    return " ".join(rest for keyword, rest in instructions if keyword == "RUN")


JAVA = ("openjdk-17-jre-headless", "libpostgresql-jdbc-java", "libxerial-sqlite-jdbc-java")


def test_the_default_image_serves_without_java_or_spark() -> None:
    """The last stage is what `docker build .` makes: the API's image, `pip install .`."""
    stages = _stages()
    assert list(stages) == ["base", "ingest", "api"]
    assert stages["base"][0] == ("FROM", "python:3.11-slim-bookworm AS base")
    assert stages["api"][0] == ("FROM", "base AS api")
    runs = _runs(stages["base"] + stages["api"])
    assert "pip install . " in runs + " " and "spark" not in runs
    assert not any(package in runs for package in JAVA) and "apt-get" not in runs
    assert ("EXPOSE", "8080") in stages["api"]
    assert any(keyword == "USER" and rest not in ("root", "0") for keyword, rest in stages["api"])


def test_the_ingest_image_adds_java_jdbc_drivers_and_the_spark_extra(
        compose: dict[str, Any]) -> None:
    stages = _stages()
    assert stages["ingest"][0] == ("FROM", "base AS ingest")
    runs = _runs(stages["ingest"])
    for package in JAVA:
        assert package in runs
    assert 'pip install ".[spark]"' in runs
    assert any(keyword == "USER" and rest not in ("root", "0")
               for keyword, rest in stages["ingest"])
    ingest = compose["services"]["ingest"]
    assert ingest["build"] == {"context": ".", "target": "ingest"}
    assert ingest["image"] != compose["services"]["migrate"]["image"]


def test_dockerfile_starts_the_txmsg_console_script() -> None:
    instructions = dict(_stages()["api"])  # the last ENTRYPOINT / CMD wins, as in Docker
    entrypoint = json.loads(instructions["ENTRYPOINT"])
    cmd = json.loads(instructions["CMD"])
    assert entrypoint == ["txmsg"]
    assert cmd[0] == "serve"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'txmsg = "app.cli:main"' in pyproject


def test_the_server_installs_without_pyspark() -> None:
    """`pip install .` brings no pyspark; `pip install '.[spark]'` (and the dev extra) does."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = [Requirement(r).name for r in project["dependencies"]]
    assert "pyspark" not in base
    extras = project["optional-dependencies"]
    assert [Requirement(r).name for r in extras["spark"]] == ["pyspark", "pyarrow"]
    assert "txmsg[spark]" in extras["dev"]


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert ".venv" in patterns and ".git" in patterns and "var" in patterns
    needed = ["pyproject.toml", "README.md", "app", "checker", "spark_outbox", "migrations"]
    for path in needed:
        assert (ROOT / path).exists(), path
        assert not any(Path(path).match(p) or path.startswith(p.rstrip("/") + "/")
                       for p in patterns), path
