"""Scopes and the one function that decides what a token's scopes allow.

A scope is ``admin`` (everything), ``metrics`` (``/metrics``: what Prometheus scrapes with),
``produce:<group>`` (the group's registration and transactions) or ``consume:<topic>``
(the topic's messages); ``*`` in place of a name means every name.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from app.domain.names import NAME_BODY

ADMIN = "admin"
PRODUCE = "produce"
CONSUME = "consume"
METRICS = "metrics"
ANY_NAME = "*"
ACTIONS = (ADMIN, PRODUCE, CONSUME, METRICS)
SCOPE_PATTERN = (rf"^(?:{ADMIN}|{METRICS}|(?:{PRODUCE}|{CONSUME}):"
                 rf"(?:\*|{NAME_BODY}))$")
_SCOPE_RE = re.compile(SCOPE_PATTERN)


def is_valid_scope(scope: object) -> bool:
    return isinstance(scope, str) and _SCOPE_RE.fullmatch(scope) is not None


def allows(scopes: Collection[str], action: str, name: str | None = None) -> bool:
    """Whether ``scopes`` allow ``action`` (admin, metrics, produce, consume) on the group
    or topic ``name`` (None for the actions without one: admin, metrics): every access
    decision of the API comes down to this."""
    if ADMIN in scopes:
        return True
    if name is None:
        return action == METRICS and METRICS in scopes
    return f"{action}:{name}" in scopes or f"{action}:{ANY_NAME}" in scopes


def names_allowed(scopes: Collection[str], action: str) -> frozenset[str] | None:
    """The names ``allows(scopes, action, name)`` is true for, as a set to filter a listing
    by; None when it is true for every name."""
    if ADMIN in scopes or f"{action}:{ANY_NAME}" in scopes:
        return None
    prefix = f"{action}:"
    return frozenset(s.removeprefix(prefix) for s in scopes if s.startswith(prefix))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a stored token (``token_id``) or the admin token (None)."""

    token_id: str | None
    scopes: frozenset[str]

    def may(self, action: str, name: str | None = None) -> bool:
        return allows(self.scopes, action, name)


# the admin token (TXMSG_ADMIN_TOKEN), and every request while access control is off
UNRESTRICTED = Principal(None, frozenset({ADMIN}))
