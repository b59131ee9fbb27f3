"""Fixtures of the fault campaign: one private PostgreSQL cluster per test session, and
for each test a fresh database in it, migrated by `txmsg migrate`, with its campaign.

Without the PostgreSQL server binaries (or a postgres user to run them as) these tests
skip, except in CI (CI=true) where they fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import run_txmsg
from tests.databases import IN_CI
from tests.faults.campaign import Campaign
from tests.faults.cluster import PgCluster, unavailable_reason


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    reason = unavailable_reason()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"the fault campaign cannot run in CI: {reason}")
        pytest.skip(f"the fault campaign needs a private PostgreSQL cluster: {reason}")
    cluster = PgCluster.create()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def campaign(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[Campaign]:
    if not pg_cluster.running:  # a failed campaign may have left it crashed
        pg_cluster.start()
    url = pg_cluster.create_database(f"campaign_{uuid.uuid4().hex[:8]}")
    migrated = run_txmsg(["migrate"], {"TXMSG_DATABASE_URL": url}, tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    campaign = Campaign(pg_cluster, url, tmp_path)
    try:
        yield campaign
    finally:
        campaign.close()
