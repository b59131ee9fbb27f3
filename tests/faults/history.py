"""The history of a fault campaign: every request with its outcome, the windows in which
a server was down on purpose, and the check of the history against the contract.

A client cannot know what a request without an answer did, so the check asks only what
the contract promises: what was acknowledged holds, and nothing holds twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

PROBLEM = "application/problem+json"
# what each kind of request may answer besides 503 database_unavailable
SUCCESS = {"send": {200, 201}, "commit": {200}, "rollback": {200}, "read": {200}}


@dataclass
class Call:
    kind: str
    target: str  # the server's name
    start: float
    end: float
    txid: str | None = None
    topic: str | None = None  # a read's
    request: Any = None
    status: int | None = None
    content_type: str | None = None
    body: Any = None
    error: str | None = None  # no answer: the client-side error

    @property
    def ok(self) -> bool:
        return self.status in SUCCESS.get(self.kind, {200})


@dataclass
class History:
    calls: list[Call] = field(default_factory=list)
    # target -> [start, end] windows in which it was down on purpose (end None: still down)
    down: dict[str, list[list[float | None]]] = field(default_factory=lambda: defaultdict(list))
    events: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def request(self, session: requests.Session, kind: str, target: str, method: str,
                url: str, *, txid: str | None = None, topic: str | None = None,
                json_body: Any = None,
                keep: Callable[[Any], Any] | None = None, timeout: float = 60) -> Call:
        """Make one request and record it; ``keep`` shrinks a successful answer's body."""
        call = Call(kind, target, time.monotonic(), 0.0, txid, topic,
                    json_body if kind == "send" else None)
        try:
            r = session.request(method, url, json=json_body, timeout=timeout)
        except requests.Timeout as exc:
            call.error = f"timeout: {exc}"
        except requests.ConnectionError as exc:
            call.error = f"connection: {exc}"
        else:
            call.status, call.content_type = r.status_code, r.headers.get("Content-Type")
            try:
                call.body = r.json()
            except ValueError:
                call.body = r.text[:2000]
            if keep is not None and call.ok:
                call.body = keep(call.body)
        call.end = time.monotonic()
        with self._lock:
            self.calls.append(call)
        return call

    def note(self, event: str) -> float:
        now = time.monotonic()
        with self._lock:
            self.events.append((now, event))
        return now

    def went_down(self, target: str) -> None:
        with self._lock:
            self.down[target].append([time.monotonic(), None])
        self.note(f"{target} down")

    def came_up(self, target: str) -> None:
        with self._lock:
            self.down[target][-1][1] = time.monotonic()
        self.note(f"{target} up")

    def was_down(self, target: str, start: float, end: float) -> bool:
        return any(s <= end and (e is None or start <= e) for s, e in self.down.get(target, []))

    def successes(self, since: float, target: str | None = None,
                  kinds: Iterable[str] = ("commit",)) -> int:
        """Requests begun after ``since`` (on ``target``, else any) that succeeded."""
        kinds = set(kinds)
        with self._lock:
            return sum(1 for c in self.calls if c.kind in kinds and c.ok and c.start >= since
                       and target in (None, c.target))

    def wait_for_successes(self, count: int, since: float, timeout: float,
                           target: str | None = None) -> bool:
        """Whether ``count`` commits begun after ``since`` succeeded within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.successes(since, target) >= count:
                return True
            time.sleep(0.05)
        return self.successes(since, target) >= count

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def dump(self, path: Path) -> None:
        with path.open("w") as out:
            for t, event in self.events:
                out.write(json.dumps({"event": event, "at": t}) + "\n")
            for call in self.snapshot():
                out.write(json.dumps(asdict(call), default=str) + "\n")

    def summary(self) -> dict[str, dict[str, int]]:
        """Outcomes per kind of request: status codes and client-side errors, counted."""
        out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for c in self.snapshot():
            outcome = str(c.status) if c.error is None else c.error.split(":", 1)[0]
            out[c.kind][outcome] += 1
        return {k: dict(v) for k, v in out.items()}


def keep_page(body: dict[str, Any]) -> dict[str, Any]:
    """A read's answer as the reader's history keeps it: offsets and ids only."""
    return {"offsets": [[m["offset"], m["message_id"]] for m in body["messages"]],
            "next_offset": body["next_offset"]}


def check_history(history: History, final: dict[str, list[dict[str, Any]]],
                  decided: Callable[[str], str], plan_of: Callable[[str], str]) -> list[str]:
    """Every way the history breaks the contract, as sentences (none: it holds).

    ``final`` is each topic's committed messages read once the load stopped and every
    abandoned transaction was resolved; ``plan_of(txid)`` is what the client meant to do
    (``commit``, ``rollback`` or ``abandon``, left to the check service), and
    ``decided(txid)`` what the producer's check callback answers for it.
    """
    calls = history.snapshot()
    bad: list[str] = []
    bad += _answers(history, calls)
    sent, committed, rolled_back = _acknowledged(calls, bad)
    at: dict[tuple[str, int], dict[str, Any]] = {}
    where: dict[str, tuple[str, int]] = {}
    visible_by_txn: dict[str, list[str]] = defaultdict(list)
    for topic, messages in final.items():
        offsets = [m["offset"] for m in messages]
        if offsets != list(range(len(offsets))):
            bad.append(f"offsets of {topic} are not dense from 0: {_gaps(offsets)}")
        for m in messages:
            at[(topic, m["offset"])] = m
            if m["message_id"] in where:
                bad.append(f"message {m['message_id']} visible twice: at {where[m['message_id']]}"
                           f" and at {(topic, m['offset'])}")
            where[m["message_id"]] = (topic, m["offset"])
            visible_by_txn[m["transaction_id"]].append(m["message_id"])
            if m.get("body", "").rsplit("/", 1)[0] != m["transaction_id"]:
                bad.append(f"message at {(topic, m['offset'])} of {m['transaction_id']} "
                           f"carries the body {m.get('body')!r}")

    for txid, messages in committed.items():
        for m in messages:
            seen = at.get((m["topic"], m["offset"]))
            if seen is None or seen["message_id"] != m["message_id"]:
                bad.append(f"acknowledged commit of {txid}: {m['message_id']} answered at "
                           f"{(m['topic'], m['offset'])}, visible at "
                           f"{where.get(m['message_id'])} (there: "
                           f"{seen and seen['message_id']})")
    for txid in rolled_back:
        if txid in visible_by_txn:
            bad.append(f"acknowledged rollback of {txid}, yet visible: {visible_by_txn[txid]}")
    asked_to_commit = {c.txid for c in calls if c.kind == "commit"}
    for txid, ids in visible_by_txn.items():
        plan = plan_of(txid)
        if txid not in asked_to_commit and (plan != "abandon" or decided(txid) != "COMMIT"):
            bad.append(f"{txid} ({plan}, callback {decided(txid)}) is visible: nobody "
                       f"committed it")
        if txid in sent and sorted(ids) != sorted(sent[txid]):
            bad.append(f"{txid} visible with messages {ids}, sent as {sent[txid]}")
    for txid in sent:
        if plan_of(txid) == "abandon" and decided(txid) == "COMMIT" \
                and txid not in visible_by_txn:
            bad.append(f"{txid} was committed by its check callback, yet is not visible")
    bad += _reader(calls, at)
    return bad


def _answers(history: History, calls: list[Call]) -> list[str]:
    """No 500 (nor any unexpected status) anywhere; no hang; a connection refused or cut
    only while that server was down on purpose."""
    bad = []
    for c in calls:
        what = f"{c.kind} {c.txid or ''} on {c.target} at {c.start:.3f}"
        if c.error is not None:
            if c.error.startswith("timeout") or not history.was_down(c.target, c.start, c.end):
                bad.append(f"{what}: no answer ({c.error}) while the server was up")
        elif c.status == 503:
            # "unavailable": a load balancer's own answer (deploy/haproxy), while a server
            # behind it was down on purpose
            codes = {"database_unavailable"} | (
                {"unavailable"} if history.was_down(c.target, c.start, c.end) else set())
            if c.content_type != PROBLEM or not isinstance(c.body, dict) \
                    or c.body.get("code") not in codes:
                bad.append(f"{what}: 503 {c.content_type} {c.body!r:.300}")
        elif not c.ok:
            bad.append(f"{what}: {c.status} {c.content_type} {c.body!r:.300}")
    return bad


def _acknowledged(calls: list[Call], bad: list[str]) -> tuple[
        dict[str, list[str]], dict[str, list[dict[str, Any]]], set[str]]:
    """Acknowledged sends (their message ids), commits (their answered offsets) and
    rollbacks; a retried request must answer as the first did."""
    sent: dict[str, list[str]] = {}
    committed: dict[str, list[dict[str, Any]]] = {}
    rolled_back: set[str] = set()
    for c in calls:
        if not c.ok or c.txid is None:
            continue
        if c.kind == "send":
            ids = [m["message_id"] for m in c.body["messages"]]
            if sent.setdefault(c.txid, ids) != ids:
                bad.append(f"send of {c.txid} answered {ids}, before {sent[c.txid]}")
        elif c.kind == "commit":
            messages = sorted(c.body["messages"], key=lambda m: m["message_id"])
            if committed.setdefault(c.txid, messages) != messages:
                bad.append(f"commit of {c.txid} answered {messages}, "
                           f"before {committed[c.txid]}")
        elif c.kind == "rollback":
            rolled_back.add(c.txid)
    return sent, committed, rolled_back


def _reader(calls: list[Call], at: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
    """The reader paged each topic from 0 by next_offset: it must have seen 0, 1, 2, ...
    with no jump (a jump is a lower offset that became visible after a higher one) and
    the message that is there now."""
    bad = []
    expected: dict[str, int] = defaultdict(int)
    for c in calls:
        if c.kind != "read" or not c.ok:
            continue
        topic = c.topic or ""
        for offset, message_id in c.body["offsets"]:
            if offset != expected[topic]:
                bad.append(f"reader of {topic} at {c.start:.3f} saw offset {offset} when "
                           f"{expected[topic]} was next: a gap filled in later")
                return bad
            now = at.get((topic, offset))
            if now is None or now["message_id"] != message_id:
                bad.append(f"reader saw {message_id} at {(topic, offset)}, now "
                           f"{now and now['message_id']}")
            expected[topic] = offset + 1
    return bad


def _gaps(offsets: list[int]) -> str:
    missing = sorted(set(range(max(offsets, default=-1) + 1)) - set(offsets))
    dupes = sorted(o for o, n in Counter(offsets).items() if n > 1)
    return f"{len(offsets)} offsets, missing {missing[:20]}, repeated {dupes[:20]}"
