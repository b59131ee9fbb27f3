"""The campaign's history check finds each way a history can break the contract (and
finds nothing in a history that keeps it): a campaign whose check cannot fail proves
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.history import Call, History, check_history, keep_page

PROBLEM = "application/problem+json"


def _call(kind: str, txid: str | None = None, status: int | None = 200, body: Any = None,
          **fields: Any) -> Call:
    return Call(kind, fields.pop("target", "serve"), fields.pop("start", 10.0),
                fields.pop("end", 10.1), txid, status=status, body=body, **fields)


def _sent(txid: str, *ids: str) -> Call:
    return _call("send", txid, 201, {"messages": [{"message_id": i} for i in ids]})


def _committed(txid: str, *placed: tuple[str, str, int]) -> Call:
    return _call("commit", txid, 200, {"messages": [
        {"message_id": i, "topic": t, "offset": o} for i, t, o in placed]})


def _visible(*rows: tuple[int, str, str]) -> list[dict[str, Any]]:
    return [{"offset": o, "message_id": i, "transaction_id": t, "body": f"{t}/0"}
            for o, i, t in rows]


def _read(topic: str, *placed: tuple[int, str]) -> Call:
    page = {"messages": [{"offset": o, "message_id": i} for o, i in placed],
            "next_offset": placed[-1][0] + 1 if placed else 0}
    return _call("read", body=keep_page(page), topic=topic)


def _plan(txid: str) -> str:
    return {"c": "commit", "r": "rollback", "a": "abandon"}[txid[-1]]


def _decided(txid: str) -> str:
    return "COMMIT" if txid.startswith("yes") else "ROLLBACK"


def _good() -> tuple[History, dict[str, list[dict[str, Any]]]]:
    """Two commits on one topic, a rollback, an abandoned transaction the check
    committed and one it rolled back, a reader that saw offsets 0 and 1 in turn."""
    h = History()
    h.calls += [_sent("t1-c", "m1"), _committed("t1-c", ("m1", "o", 0)),
                _sent("t2-c", "m2"), _call("commit", "t2-c", 503, {
                    "code": "database_unavailable"}, content_type=PROBLEM),
                _committed("t2-c", ("m2", "o", 1)),
                _sent("t3-r", "m3"), _call("rollback", "t3-r", 200, {}),
                _sent("yes-a", "m4"), _sent("no-a", "m5"),
                _read("o", (0, "m1")), _read("o", (1, "m2")), _read("o")]
    final = {"o": _visible((0, "m1", "t1-c"), (1, "m2", "t2-c"), (2, "m4", "yes-a"))}
    return h, final


def _check(h: History, final: dict[str, list[dict[str, Any]]]) -> list[str]:
    return check_history(h, final, _decided, _plan)


def test_a_history_that_keeps_the_contract_passes() -> None:
    assert _check(*_good()) == []


@pytest.mark.parametrize(("change", "found"), [
    ("lost commit", "acknowledged commit of t2-c"),
    ("moved commit", "acknowledged commit of t1-c"),
    ("duplicate", "visible twice"),
    ("gap", "not dense"),
    ("rollback visible", "acknowledged rollback of t3-r"),
    ("abandoned rollback visible", "nobody committed it"),
    ("abandoned commit missing", "yes-a was committed by its check callback"),
    ("commit never asked", "nobody committed it"),
    ("partial transaction", "sent as"),
    ("500", "500"),
    ("503 without its code", "503"),
    ("cut while up", "no answer"),
    ("hang while down", "no answer (timeout"),
    ("reader jumped", "a gap filled in later"),
    ("retry answered otherwise", "commit of t1-c answered"),
])
def test_each_break_of_the_contract_is_found(change: str, found: str) -> None:
    h, final = _good()
    o = final["o"]
    if change == "lost commit":
        del o[1:]
    elif change == "moved commit":
        o[0], o[1] = {**o[1], "offset": 0}, {**o[0], "offset": 1}
    elif change == "duplicate":
        o.append({**o[0], "offset": 3})
    elif change == "gap":
        o[2]["offset"] = 3
    elif change == "rollback visible":
        o.append(_visible((3, "m3", "t3-r"))[0])
    elif change == "abandoned rollback visible":
        o.append(_visible((3, "m5", "no-a"))[0])
    elif change == "abandoned commit missing":
        del o[2]
    elif change == "commit never asked":
        h.calls.append(_sent("t4-c", "m6"))
        o.append(_visible((3, "m6", "t4-c"))[0])
    elif change == "partial transaction":
        h.calls[0] = _sent("t1-c", "m1", "m9")
    elif change == "500":
        h.calls.append(_call("send", "t9-c", 500, {"code": "internal_error"}))
    elif change == "503 without its code":
        h.calls.append(_call("read", None, 503, "<html>", content_type="text/html"))
    elif change == "cut while up":
        h.calls.append(_call("send", "t9-c", None, error="connection: reset"))
    elif change == "hang while down":
        h.down["serve"].append([9.0, 11.0])
        h.calls.append(_call("send", "t9-c", None, error="timeout: read"))
    elif change == "reader jumped":
        h.calls[-3:] = [_read("o", (1, "m2")), _read("o", (0, "m1"))]
    elif change == "retry answered otherwise":
        h.calls.append(_committed("t1-c", ("m1", "o", 2)))
    found_in = _check(h, final)
    assert any(found in v for v in found_in), found_in


def test_no_answer_while_the_server_was_down_on_purpose_is_allowed() -> None:
    h, final = _good()
    h.down["serve"].append([9.0, None])
    h.calls.append(_call("send", "t9-c", None, error="connection: refused", start=12.0))
    assert _check(h, final) == []
