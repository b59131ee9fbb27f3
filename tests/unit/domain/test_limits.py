"""The bounds (``app.domain.limits``): each written once, and the request models, the
answers' shapes and the API's query parameters all held to the same numbers."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import TypeAdapter

from app.api import schemas
from app.domain import limits
from app.domain.messages import ProducerGroupIn, TransactionOptions
from app.domain.subscription_models import BackoffIn, SubscriptionIn

ROOT = Path(__file__).resolve().parents[3]
# settings (TXMSG_*) have their own bounds, next to each setting
SETTINGS = ROOT / "app" / "config.py"
# an upper bound spelled as a number: ``le=1000``, ``lt=60``, ``"maximum": 1000``
_LITERAL_BOUND = re.compile(r"""\b(?:le|lt)=[0-9]|["']maximum["']\s*:\s*[0-9]""")
# HTTP's own range of error statuses, not a limit of ours
ALLOWED = {"status: Annotated[int, Field(ge=400, le=599)]"}


def test_no_upper_bound_is_a_literal() -> None:
    """A model's, a schema's or a query parameter's upper bound names its limit (a
    second literal of it is how the two came apart)."""
    found = {str(path.relative_to(ROOT)): hits
             for package in ("app", "checker", "spark_outbox")
             for path in sorted((ROOT / package).rglob("*.py")) if path != SETTINGS
             if (hits := [line.strip() for line in path.read_text().splitlines()
                          if _LITERAL_BOUND.search(line) and line.strip() not in ALLOWED])}
    assert found == {}


def _bounds(schema: dict[str, object], field: str) -> tuple[object, object]:
    prop = schema["properties"][field]  # type: ignore[index]
    return prop.get("minimum"), prop.get("maximum")  # type: ignore[union-attr]


def test_requests_and_answers_take_the_same_bounds() -> None:
    asked = SubscriptionIn.model_json_schema()
    answered = TypeAdapter(schemas.Subscription).json_schema()
    for schema in (asked, answered):
        assert _bounds(schema, "ack_timeout_ms") == (limits.MIN_ACK_TIMEOUT_MS,
                                                     limits.MAX_ACK_TIMEOUT_MS)
        assert _bounds(schema, "max_redeliveries") == (0, limits.MAX_REDELIVERIES)
    for schema in (BackoffIn.model_json_schema(), TypeAdapter(schemas.Backoff).json_schema()):
        assert _bounds(schema, "min_ms") == _bounds(schema, "max_ms") == (
            0, limits.MAX_BACKOFF_MS)
    for schema in (ProducerGroupIn.model_json_schema(),
                   TypeAdapter(schemas.ProducerGroup).json_schema()):
        assert _bounds(schema, "check_timeout_ms") == (limits.MIN_CHECK_TIMEOUT_MS,
                                                       limits.MAX_CHECK_TIMEOUT_MS)
    assert _bounds(TransactionOptions.model_json_schema(), "check_immunity_seconds") == (
        0, limits.MAX_CHECK_IMMUNITY_SECONDS)
