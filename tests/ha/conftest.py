"""Fixtures of the high-availability tests: real etcd, Patroni, PostgreSQL 15, HAProxy
and Spark processes, one set per module, always stopped.

Without the Debian packages (scripts/ensure-system-deps.sh installs them) these tests
skip, except in CI (CI=true) where they fail.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import IN_CI
from tests.ha.infra import PatroniCluster, SparkCluster, unavailable_reason
from tests.spark.conftest import _missing as spark_unavailable_reason
from tests.spark.conftest import spark  # noqa: F401 (the local session that reads the lake)


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


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[SparkCluster]:
    require(spark_unavailable_reason())
    root = Path(tempfile.mkdtemp(prefix="txmsg-spark-"))
    cluster: SparkCluster | None = None
    try:
        cluster = SparkCluster(root)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
