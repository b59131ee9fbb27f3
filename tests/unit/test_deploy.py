"""deploy/: the Prometheus configuration and alert rules checked and unit-tested by
Debian's promtool, the Grafana provisioning and dashboard held to their shape, and the
compose file's monitoring profile wired to them. (That every metric the dashboard and
the alerts name is one the app exposes: tests/integration/ops/test_deploy_metrics.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert Path(PROMTOOL).exists(), "promtool missing: run `make system-deps` (Debian prometheus)"
    return subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True,
                          timeout=120, check=False)


def test_promtool_accepts_the_alert_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_prometheus_configuration(tmp_path: Path) -> None:
    """Checked whole (rule files and the credentials file included) on a copy whose
    credentials file, compose's secret in the container, exists."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    token = tmp_path / "txmsg_metrics_token"
    token.write_text("txmsg_0123456789abcdef_" + "x" * 43)
    config["scrape_configs"][0]["authorization"]["credentials_file"] = str(token)
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_fire_on_the_series_they_are_for() -> None:
    """alerts.test.yml: stuck transactions, discards, the 5xx rate and dead letters,
    firing and not."""
    result = promtool("test", "rules", "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "alerts.yml"
    broken.write_text((PROMETHEUS / "alerts.yml").read_text().replace(
        "> 1800", "> > 1800"))
    result = promtool("check", "rules", str(broken))
    assert result.returncode != 0


def test_the_rules_cover_what_on_call_is_paged_for() -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"][0]["rules"]
    by_name = {rule["alert"]: rule["expr"] for rule in rules}
    expected = {
        "TxmsgStuckTransactions": "txmsg_oldest_prepared_transaction_age_seconds",
        "TxmsgTransactionsDiscarded": "txmsg_discard_messages_total",
        "TxmsgHigh5xxRate": 'status=~"5.."',
        "TxmsgSubscriptionBacklogGrowing": "txmsg_subscription_backlog",
        "TxmsgDeadLettersGrowing": "txmsg_dead_letter_messages_total",
    }
    for alert, needle in expected.items():
        assert needle in by_name[alert], alert
    assert all(rule["labels"]["severity"] in ("warning", "critical") for rule in rules)
    assert all(rule["annotations"]["summary"] for rule in rules)


def test_prometheus_scrapes_the_compose_api_service() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["api:8080"]
    assert config["rule_files"] == ["alerts.yml"]
    # /metrics with access control on: a bearer token from compose's secret
    assert job["authorization"] == {"type": "Bearer",
                                    "credentials_file": "/run/secrets/txmsg_metrics_token"}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["prometheus"]["secrets"] == ["txmsg_metrics_token"]
    assert compose["secrets"]["txmsg_metrics_token"] == {"environment": "PROMETHEUS_TOKEN"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads((GRAFANA / "dashboards" / "txmsg.json").read_text())


def test_the_dashboard_uses_the_provisioned_datasource(dashboard: dict[str, Any]) -> None:
    [source] = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
            assert "txmsg_" in target["expr"]


def test_the_dashboard_provider_reads_where_compose_mounts_the_dashboards() -> None:
    [provider] = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "txmsg.yml").read_text())["providers"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts


def test_monitoring_sits_behind_its_profile_with_the_deploy_files() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
    prometheus = services["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    for service in services.values():  # every file a service mounts from here exists
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), source
    # the default `docker compose up` is unchanged: nothing else got a profile it had not
    assert "profiles" not in services["api"] and "profiles" not in services["db"]
