"""Fixtures of the high-availability tests: real etcd, Patroni, PostgreSQL 15, HAProxy
and Spark processes, one set per module, always stopped.

Without the Debian packages (scripts/ensure-system-deps.sh installs them) these tests
skip, except in CI (CI=true) where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.databases import IN_CI
from tests.ha.infra import PatroniCluster, unavailable_reason


def require(reason: str | None) -> None:
    """Skip (fail in CI) when the infrastructure cannot run here."""
    if reason is not None:
        if IN_CI:
            pytest.fail(f"the high-availability tests cannot run in CI: {reason}")
        pytest.skip(f"the high-availability tests need {reason}")


@pytest.fixture(scope="module")
def patroni() -> Iterator[PatroniCluster]:
    require(unavailable_reason())
    cluster = PatroniCluster.create(size=2)
    try:
        yield cluster
    finally:
        cluster.destroy()
