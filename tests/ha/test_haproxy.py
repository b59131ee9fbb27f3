"""Two `txmsg serve` processes on one PostgreSQL behind HAProxy (deploy/haproxy), each
with its check service; one killed with SIGKILL mid-burst. No acknowledged commit is
lost, clients see at most cut connections or 503 while HAProxy switches, and the other
process takes over the dead one's checks."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.acceptance.conftest import run_txmsg
from tests.callbacks import wait_until
from tests.databases import scratch_pg_database
from tests.faults.campaign import PROGRESS, RECOVERY_SECONDS, Campaign, check_callback
from tests.faults.load import Load, register
from tests.ha.conftest import require
from tests.ha.infra import HAProxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LB = "haproxy"


class SharedServer:
    """The shared PostgreSQL, as a campaign's evidence names it."""

    @staticmethod
    def log_tail(lines: int = 20) -> str:
        return "(the shared PostgreSQL server)"


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    require(None if shutil.which("haproxy") else "haproxy (scripts/ensure-system-deps.sh)")
    with scratch_pg_database("txmsg_ha") as url:
        migrated = run_txmsg(["migrate"], {"TXMSG_DATABASE_URL": url}, tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        yield url


def test_a_node_killed_behind_haproxy_loses_nothing(database: str, tmp_path: Path) -> None:
    campaign = Campaign(SharedServer(), database, tmp_path)  # type: ignore[arg-type]
    callback = check_callback()
    proxy: HAProxy | None = None
    try:
        servers = campaign.serve_many(["api1", "api2"])
        proxy = HAProxy(tmp_path, f"127.0.0.1:{servers['api1'].port}",
                        f"127.0.0.1:{servers['api2'].port}")
        register(proxy.url, callback.url)
        load = Load(campaign.history, {LB: proxy.url}, clients=6)
        load.start()
        history = campaign.history
        assert history.wait_for_successes(PROGRESS, history.note("load started"),
                                          RECOVERY_SECONDS, LB)

        # the switch: what was in flight on api2 is cut (HAProxy answers it 503)
        history.went_down(LB)
        killed = history.note("api2 killed")
        checks_before = len(callback.checks)
        servers["api2"].kill()
        assert history.wait_for_successes(PROGRESS, killed, RECOVERY_SECONDS, LB), \
            campaign.evidence(["no commits through HAProxy after the kill"])
        # the switch ends when HAProxy's health check has taken api2 out of the rotation:
        # until then a request may still meet api2's dead connections
        wait_until(lambda: "Server txmsg/api2 is DOWN" in proxy.log.read_text(),
                   timeout=RECOVERY_SECONDS, what="HAProxy to mark api2 down")
        history.came_up(LB)
        served_after = history.note("api1 alone")
        assert history.wait_for_successes(PROGRESS, served_after, RECOVERY_SECONDS, LB)

        outcome = campaign.finish(load, proxy.url)
        print(outcome)
        assert len(callback.checks) > checks_before, "no check ran after api2 was killed"
        assert servers["api1"].proc.poll() is None

        # no process left: HAProxy's own answer is txmsg's 503 problem+json
        servers["api1"].kill()
        answer = requests.get(f"{proxy.url}/v1/topics/orders/messages", timeout=60)
        assert answer.status_code == 503, answer.text
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert answer.json()["code"] == "unavailable"
    finally:
        if proxy is not None:
            proxy.stop()
        callback.close()
        campaign.close()
