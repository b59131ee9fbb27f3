"""The consumer's batch rules without I/O (``txmsg_client._relay``): a scripted service
answers each step, as the sync and asyncio drivers would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from txmsg_client import _relay
from txmsg_client._wire import ReceivedMessage
from txmsg_client.errors import TxmsgError


class Unreachable(Exception):
    pass


def msg(offset: int) -> ReceivedMessage:
    return ReceivedMessage(topic="in", offset=offset, message_id=f"m{offset}", body="x",
                           body_bytes=b"x")


def run(messages: list[ReceivedMessage], answer: Callable[[_relay.Step], Any],
        relay: bool = False) -> tuple[Any, list[_relay.Step]]:
    seen: list[_relay.Step] = []

    def do(step: _relay.Step) -> Any:
        seen.append(step)
        return answer(step)

    batch = _relay.Batch(messages, "in", "sub", relay=relay,
                         failures=(Unreachable, TxmsgError))
    return _relay.drive(batch.steps(), do), seen


def calls(seen: list[_relay.Step]) -> list[str]:
    return [s.action if isinstance(s, _relay.Call) else type(s).__name__ for s in seen]


def test_handled_messages_are_acked_and_failed_ones_nacked() -> None:
    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle) and step.message.offset == 1:
            raise ValueError("bad")
        return {}

    result, seen = run([msg(0), msg(1), msg(2)], answer)
    assert (result.acked, result.nacked) == ([0, 2], [1])
    assert calls(seen) == ["Handle", "Handle", "Handle", "ack", "nack"]


def test_a_relay_commits_outputs_with_their_inputs_acks() -> None:
    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle):
            return {"topic": "out", "body": str(step.message.offset)}
        if step.action == "commit":
            return {"messages": [{"offset": 7}]}
        return {}

    result, seen = run([msg(3), msg(4)], answer, relay=True)
    send = next(s for s in seen if isinstance(s, _relay.Call) and s.action == "send")
    assert send.kwargs["acks"] == [{"topic": "in", "subscription": "sub", "offsets": [3, 4]}]
    assert result.acked == [3, 4] and result.published == [{"offset": 7}]
    assert calls(seen) == ["Handle", "Handle", "send", "commit"]


def test_an_unreachable_service_is_tried_again_then_left_to_the_check() -> None:
    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle):
            return {"topic": "out", "body": "x"}
        if isinstance(step, _relay.Call):
            raise Unreachable
        return None

    result, seen = run([msg(5)], answer, relay=True)
    assert calls(seen) == ["Handle", "send", "Sleep", "send", "Sleep", "send",
                           "rollback", "Sleep", "rollback", "Sleep", "rollback"]
    assert result.acked == [] and result.released == [] and len(result.errors) == 1


def test_a_commit_refused_for_its_acks_is_rolled_back_and_its_inputs_released() -> None:
    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle):
            return {"topic": "out", "body": "x"}
        if step.action == "commit":
            raise TxmsgError(409, "ack_not_pending", "acknowledged since")
        return {}

    result, seen = run([msg(6)], answer, relay=True)
    assert calls(seen) == ["Handle", "send", "commit", "rollback"]
    assert result.released == [6] and result.acked == []


def test_an_interrupt_settles_the_rest_then_leaves() -> None:
    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle) and step.message.offset == 9:
            raise KeyboardInterrupt
        return {}

    with pytest.raises(KeyboardInterrupt):
        run([msg(8), msg(9), msg(10)], answer)


def keyed(offset: int, key: str | None, topic: str = "in") -> ReceivedMessage:
    return ReceivedMessage(topic=topic, offset=offset, message_id=f"m{offset}", body="x",
                           body_bytes=b"x", ordering_key=key)


def test_a_failed_message_holds_back_the_rest_of_its_key_in_the_batch() -> None:
    handled: list[int] = []

    def answer(step: _relay.Step) -> Any:
        if isinstance(step, _relay.Handle):
            handled.append(step.message.offset)
            if step.message.offset == 0:
                raise ValueError("bad")
        return {}

    batch = [keyed(0, "a"), keyed(1, "b"), keyed(2, "a"), keyed(3, None), keyed(4, "a"),
             keyed(5, "a", topic="other")]
    result, seen = run(batch, answer)
    assert handled == [0, 1, 3, 5]  # key a stops at its failure; b, no key, a of another topic go on
    assert (result.acked, result.nacked, result.held) == ([1, 3, 5], [0], [2, 4])
    nack = next(s for s in seen if isinstance(s, _relay.Call) and s.action == "nack")
    assert [m.offset for m in nack.kwargs["offsets"]] == [0, 2, 4]  # the failed one first


def test_settling_names_each_message_so_it_goes_to_its_topic() -> None:
    result, seen = run([keyed(0, None, "t1"), keyed(0, None, "t2")],
                       lambda step: {"topic": "out", "body": "x"}
                       if isinstance(step, _relay.Handle) else {"messages": []}, relay=True)
    send = next(s for s in seen if isinstance(s, _relay.Call) and s.action == "send")
    assert send.kwargs["acks"] == [{"topic": "t1", "subscription": "sub", "offsets": [0]},
                                   {"topic": "t2", "subscription": "sub", "offsets": [0]}]
