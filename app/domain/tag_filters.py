"""RocketMQ's tag filter: ``"*"`` (every message) or tags joined by ``||``
(``"created || paid"``, spaces around each ignored). A message without a tag matches only
``"*"``; one that does not match is never delivered to the subscription and counts as
acknowledged."""

from __future__ import annotations

import functools

EVERY_TAG = "*"
MAX_TAG_FILTER_CHARS = 4096


class MalformedTagFilter(ValueError):
    pass


@functools.lru_cache(maxsize=1024)
def parse(expression: str) -> frozenset[str] | None:
    """The tags an expression accepts, or None for every message (``"*"``)."""
    if len(expression) > MAX_TAG_FILTER_CHARS:
        raise MalformedTagFilter(f"a tag filter has at most {MAX_TAG_FILTER_CHARS} characters")
    if expression.strip() == EVERY_TAG:
        return None
    tags = [part.strip() for part in expression.split("||")]
    for tag in tags:
        if not tag:
            raise MalformedTagFilter(
                f"tag filter {expression!r}: '*' or tags joined by '||', none of them empty")
        if "|" in tag or "*" in tag or "\x00" in tag:
            raise MalformedTagFilter(
                f"tag filter {expression!r}: tag {tag!r} has '|', '*' or NUL in it")
    return frozenset(tags)


def normalized(expression: str) -> str:
    """The expression as stored and shown: ``"*"`` or its tags joined by ``"||"``, in the
    order given, without repeats."""
    tags = parse(expression)
    if tags is None:
        return EVERY_TAG
    seen = dict.fromkeys(part.strip() for part in expression.split("||"))
    return "||".join(seen)


def matches(expression: str, tag: str | None) -> bool:
    """Whether a message with ``tag`` passes the (stored, valid) expression."""
    tags = parse(expression)
    return tags is None or (tag is not None and tag in tags)
