"""Where reads go: the replica while it answers, the primary for a while after it fails,
and the primary's answer where the replica's may only lag. Fake engines: only which one
a read was given matters here."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.errors import DatabaseUnavailable
from app.storage.replica import RETRY_SECONDS, Reads


class Engine:
    def __init__(self, name: str, *, down: bool = False, answer: Any = "row") -> None:
        self.name, self.down, self.answer = name, down, answer
        self.reads = 0


def read(engine: Any) -> Any:
    engine.reads += 1
    if engine.down:
        raise DatabaseUnavailable(f"{engine.name} is down")
    return (engine.name, engine.answer)


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reads(replica: Engine | None, primary: Engine) -> tuple[Reads, Ticks]:
    ticks = Ticks()
    return Reads(replica, primary, clock=ticks), ticks  # type: ignore[arg-type]


def test_without_a_replica_every_read_goes_to_the_primary() -> None:
    primary = Engine("primary")
    r, _ = reads(None, primary)
    assert r.engine is primary  # type: ignore[comparison-overlap]
    assert r.run(read) == ("primary", "row")
    assert r.replica_reachable() is None


def test_the_primary_given_as_its_own_replica_is_no_replica() -> None:
    primary = Engine("primary")
    assert Reads(primary, primary).replica is None  # type: ignore[arg-type]


def test_reads_go_to_the_replica_while_it_answers() -> None:
    replica, primary = Engine("replica"), Engine("primary")
    r, _ = reads(replica, primary)
    assert r.run(read) == ("replica", "row")
    assert (replica.reads, primary.reads) == (1, 0)


def test_a_replica_that_fails_is_left_alone_for_a_while(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    replica, primary = Engine("replica", down=True), Engine("primary")
    r, ticks = reads(replica, primary)
    with caplog.at_level(logging.WARNING, logger="app.storage.replica"):
        assert r.run(read) == ("primary", "row")
        ticks.now += RETRY_SECONDS - 0.1
        assert r.run(read) == ("primary", "row")
    assert replica.reads == 1  # one timeout, not one per read
    assert len(caplog.records) == 1 and "replica is down" in caplog.records[0].getMessage()
    replica.down = False
    ticks.now += 0.2
    assert r.run(read) == ("replica", "row")


def test_a_lagging_answer_is_read_again_on_the_primary() -> None:
    replica, primary = Engine("replica", answer=None), Engine("primary")
    r, _ = reads(replica, primary)
    assert r.run(read, lagging=lambda a: a[1] is None) == ("primary", "row")
    assert r.run(read, lagging=lambda a: False) == ("replica", None)


def test_with_the_primary_down_the_replicas_lagging_answer_stands() -> None:
    replica, primary = Engine("replica", answer=None), Engine("primary", down=True)
    r, _ = reads(replica, primary)
    assert r.run(read, lagging=lambda a: a[1] is None) == ("replica", None)


def test_both_down_is_the_primarys_error() -> None:
    r, _ = reads(Engine("replica", down=True), Engine("primary", down=True))
    with pytest.raises(DatabaseUnavailable, match="primary is down"):
        r.run(read)
