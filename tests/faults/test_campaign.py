"""The fault campaign: PostgreSQL crashed and restarted, `txmsg serve` and `txmsg checker`
killed with SIGKILL, under producers that send, commit, roll back and abandon
transactions while a reader pages every topic by offset. Every request is recorded;
the history must keep the contract (see ``tests.faults.history.check_history``).
"""

from __future__ import annotations

import pytest

from tests.faults.campaign import Campaign, check_callback
from tests.faults.load import Load, register

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_crashes_and_kills_keep_every_acknowledged_answer(campaign: Campaign) -> None:
    callback = check_callback()
    try:
        served = campaign.serve("serve", "--no-checker")
        campaign.checker()
        register(served.url, callback.url)
        load = Load(campaign.history, {"serve": served.url}, clients=8)
        load.start()
        campaign.wait_for_progress(campaign.history.note("load started"), "at the start")

        campaign.crash_database()
        campaign.kill_serve("serve", "--no-checker")
        campaign.crash_database()
        campaign.kill_checker_mid_check(callback)
        campaign.crash_database()

        outcome = campaign.finish(load, served.url)
        print(outcome)
        assert callback.checks, "the check service never ran"
    finally:
        callback.close()


def test_two_serve_processes_on_one_database(campaign: Campaign) -> None:
    """The scale-out layout: two `txmsg serve`, each with its check service, on one
    PostgreSQL, under the same load and the same checks, through a database crash."""
    callback = check_callback()
    try:
        servers = campaign.serve_many(["serve-a", "serve-b"])
        register(servers["serve-a"].url, callback.url)
        load = Load(campaign.history, {name: s.url for name, s in servers.items()},
                    clients=8)
        load.start()
        campaign.wait_for_progress(campaign.history.note("load started"), "at the start")

        campaign.crash_database()
        campaign.kill_serve("serve-b")

        outcome = campaign.finish(load, servers["serve-a"].url)
        print(outcome)
        served_by = {c.target for c in campaign.history.calls if c.kind == "commit" and c.ok}
        assert served_by == set(servers), served_by
        assert callback.checks, "the check services never ran"
    finally:
        callback.close()
