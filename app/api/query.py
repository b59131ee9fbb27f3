"""The API's query parameters, each declared once: a route names the ones it takes
(``Route.query``, ``app.api.routes``), its handler reads them parsed (``Call.arg``) and
the OpenAPI document describes them (``app.api.openapi``), all from the same ``Query``.

An out-of-range or malformed value is a 400 ``invalid_query_parameter`` naming the
parameter; an absent one is the parameter's default. Bounds come from
``app.domain.limits``, names' rules from ``app.domain.names``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.domain.limits import DEFAULT_PAGE_LIMIT, MAX_INT64, MAX_PAGE_LIMIT
from app.domain.names import Name, check_name
from app.errors import InvalidRequest
from app.problems import ProblemCode
from app.vocabulary import State

Schema = dict[str, Any]
# a type's JSON Schema, as the document's components give it
SchemaOf = Callable[[Any], Schema]
# plain decimal digits only (int() would also take "1_0", " 7" or other scripts' digits)
_INT_RE = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class Query:
    """One query parameter: ``key`` names it among the document's parameters (two routes'
    ``after`` may differ), ``name`` in the URL."""

    key: str
    name: str
    description: str

    def parse(self, raw: str | None) -> Any:
        """The handler's value of ``raw`` (None: absent)."""
        return raw

    def schema(self, schema_of: SchemaOf) -> Schema:
        return {"type": "string"}

    def refused(self, rule: str) -> InvalidRequest:
        return InvalidRequest(f"query parameter {self.name} {rule}",
                              code=ProblemCode.INVALID_QUERY_PARAMETER, parameter=self.name)


@dataclass(frozen=True, slots=True)
class Integer(Query):
    lo: int = 0
    hi: int = MAX_INT64
    default: int = 0

    def parse(self, raw: str | None) -> int:
        if raw is None:
            return self.default
        value = int(raw) if _INT_RE.fullmatch(raw) else None
        if value is None or value < self.lo or value > self.hi:
            bounds = f"{self.lo}..{self.hi}" if self.hi != MAX_INT64 else f">= {self.lo}"
            raise self.refused(f"must be an integer {bounds}, got {raw!r}")
        return value

    def schema(self, schema_of: SchemaOf) -> Schema:
        return {"type": "integer", "minimum": self.lo, "maximum": self.hi,
                "default": self.default}


@dataclass(frozen=True, slots=True)
class NameCursor(Query):
    """A name to page after (``app.domain.names``); absent: from the first."""

    what: str = "a name"

    def parse(self, raw: str | None) -> str:
        if raw is None:
            return ""
        return check_name(f"query parameter {self.name} ({self.what})", raw,
                          code=ProblemCode.INVALID_QUERY_PARAMETER, parameter=self.name)

    def schema(self, schema_of: SchemaOf) -> Schema:
        return schema_of(Name)


@dataclass(frozen=True, slots=True)
class OneOf(Query):
    """One of ``values``, handed on as given: the domain refuses the others (its rule
    is shared with the CLI)."""

    values: tuple[str, ...] = ()

    def schema(self, schema_of: SchemaOf) -> Schema:
        # inline, not a component: a query parameter's schema stays plain
        return {"type": "string", "enum": list(self.values)}


LIMIT = Integer("limit", "limit", "Page size; out of range → 400.",
                lo=1, hi=MAX_PAGE_LIMIT, default=DEFAULT_PAGE_LIMIT)
FROM_OFFSET = Integer("from_offset", "from_offset", "First offset of the page.")
AFTER_ID = Integer("after", "after", "Cursor: the previous page's `next_after`.")
AFTER_TOPIC = NameCursor("after_topic", "after",
                         "Cursor: the previous page's `next_after` (a topic name).",
                         what="a topic name")
AFTER_SUBSCRIPTION = NameCursor(
    "after_subscription", "after",
    "Cursor: the previous page's `next_after` (a subscription name).",
    what="a subscription name")
STATE = OneOf("state", "state", "Only transactions in this state.",
              values=tuple(s.value for s in State))
