"""TXMSG_READ_DATABASE_URL on Patroni's synchronous standby: offset reads, message lookups,
the dashboard's read pages and `txmsg ingest` come from the standby, never with a gap
while commits stream in, and go on while the primary is down (sends then answer 503)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.acceptance.conftest import run_txmsg
from tests.callbacks import wait_until
from tests.faults.campaign import RECOVERY_SECONDS, Campaign, check_callback
from tests.faults.load import GROUP, Load, read_all, register, unresolved_abandoned
from tests.ha.conftest import require
from tests.ha.infra import PatroniCluster, pause, replayed
from tests.spark.conftest import _missing as spark_unavailable_reason
from tests.spark.helpers import FAST_START_JVM, checkpoint, ingest_env, run_ingest

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(600)]


def test_reads_on_the_standby_stay_dense_and_outlive_the_primary(patroni: PatroniCluster,
                                                                 tmp_path: Path) -> None:
    url = patroni.create_database("replica")
    migrated = run_txmsg(["migrate"], {"TXMSG_DATABASE_URL": url}, tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    primary = patroni.leader()
    standby = patroni.node("sync_standby")
    assert standby is not None
    campaign = Campaign(patroni, url, tmp_path)  # type: ignore[arg-type]
    campaign.env["TXMSG_READ_DATABASE_URL"] = standby.url("replica")
    callback = check_callback()
    try:
        served = campaign.serve("serve")
        register(served.url, callback.url)
        # its reader pages every topic on the standby while the producers commit
        load = Load(campaign.history, {"serve": served.url}, clients=4)
        load.start()
        campaign.wait_for_progress(campaign.history.note("load started"), "at the start")
        load.stop()
        wait_until(lambda: not unresolved_abandoned(served.url), timeout=RECOVERY_SECONDS,
                   what="the check service to resolve every abandoned transaction")
        wait_until(lambda: replayed(primary, standby, "replica"), timeout=RECOVERY_SECONDS,
                   what="the standby to replay what the primary wrote")
        outcome = campaign.finish(load, served.url)
        print(outcome)
        before = read_all(served.url)

        pause(patroni)
        primary.kill_postgres()
        campaign.history.note("primary killed")
        sent = requests.post(f"{served.url}/v1/producer-groups/{GROUP}/transactions",
                             json={"transaction_id": "after-the-primary",
                                   "messages": [{"topic": "orders", "body": "x"}]},
                             timeout=60)
        assert sent.status_code == 503, sent.text
        assert sent.json()["code"] == "database_unavailable"
        assert read_all(served.url) == before
        some = before["orders"][-1]
        looked_up = requests.get(f"{served.url}/v1/messages/{some['message_id']}", timeout=60)
        assert looked_up.status_code == 200, looked_up.text
        assert looked_up.json()["offset"] == some["offset"]
        for page in ("/ui/topics", "/ui/topics/orders", f"/ui/messages/{some['message_id']}"):
            shown = requests.get(f"{served.url}{page}", timeout=60)
            assert shown.status_code == 200, (page, shown.status_code, shown.text[:500])

        # ingest (local[*]) plans from the standby's watermarks and reads it alone
        require(spark_unavailable_reason())
        env = ingest_env(url, TXMSG_READ_DATABASE_URL=standby.url("replica"),
                         JAVA_TOOL_OPTIONS=FAST_START_JVM)
        done = run_ingest(env, tmp_path / "lake")
        assert done.returncode == 0, done.stderr
        assert checkpoint(tmp_path / "lake") == {
            topic: len(messages) for topic, messages in before.items() if messages}
    finally:
        callback.close()
        campaign.close()
