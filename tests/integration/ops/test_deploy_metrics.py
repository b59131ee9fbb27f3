"""Every metric and label the Grafana dashboard and the alert rules name is one the app
really exposes (a scrape of the app on each store), so no panel or alert is silently
empty. The traffic includes a subscription, whose series exist while it does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import register, send

ROOT = Path(__file__).resolve().parents[3]
_SELECTOR = re.compile(r"\b(txmsg_[A-Za-z0-9_]+)(?:\{([^}]*)\})?")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


def exposed(client: Any) -> dict[str, set[str]]:
    """Sample name -> its label names, from a scrape after some traffic."""
    register(client)
    send(client)
    assert client.put("/v1/topics/orders/subscriptions/billing", json={}).status_code == 201
    client.get("/no/such/route")
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").data.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def expressions() -> list[tuple[str, str]]:
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/txmsg.json").read_text())
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    out = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    out += [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    return out


def test_every_expression_names_exposed_metrics_and_labels(client: Any) -> None:
    metrics = exposed(client)
    named = set()
    for where, expr in expressions():
        labels_here: set[str] = {"le", "job", "instance"}
        for name, matchers in _SELECTOR.findall(expr):
            named.add(name)
            assert name in metrics, (where, name)
            labels_here |= metrics[name]
            for matcher in filter(None, (m.strip() for m in (matchers or "").split(","))):
                label = re.split(r"[=!~]", matcher, maxsplit=1)[0].strip()
                assert label in metrics[name], (where, name, label)
        for group in _BY.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in labels_here, (where, label)
    # the dashboard and alerts look at what on-call needs
    for needed in ("txmsg_oldest_prepared_transaction_age_seconds",
                   "txmsg_http_request_duration_seconds_bucket",
                   "txmsg_check_duration_seconds_bucket", "txmsg_writer_queue_depth",
                   "txmsg_group_commit_batch_size_sum", "txmsg_checks_total",
                   "txmsg_discard_messages_total"):
        assert needed in named, needed
