"""Access control at the edge: each route declares what it needs (an ``Access``), in the
route table next to the route (``app.api.routes``):

    Route("POST", "/v1/producer-groups/{group}/transactions",
          Access(action=PRODUCE, param="group"), ...)   # the scope produce:<the group>

Open routes need nothing; token-only routes take any valid token and narrow what they
answer by its scopes (the handler's ``call.principal``). While access control is off (no
``TXMSG_ADMIN_TOKEN``) every route is open. A Flask view that declares nothing (the
dashboard's ``@public`` pages aside) is admin only, so a forgotten declaration fails
closed. A scope depends on the request's path only: the ASGI front checks each request,
to a route or to a Flask view, with ``authorize`` before it reads the request's body (a
token may not make the process hold a body it may not send); it is the one place that
checks. The OpenAPI document lists each route's declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from app.domain.access import ADMIN, Principal, allows
from app.errors import Forbidden, Unauthenticated

F = TypeVar("F", bound=Callable[..., Any])
BEARER = "bearer"  # the OpenAPI security scheme's name


@dataclass(frozen=True, slots=True)
class Access:
    """What a route needs: nothing (``open``), any valid token (``action`` None), or the
    scope ``action:<name>`` where the path parameter ``param`` gives the name."""

    open: bool = False
    action: str | None = None
    param: str | None = None
    note: str = ""  # what a token-only route checks itself
    forbids: bool = True  # whether a valid token may be refused (403)

    @property
    def required_scope(self) -> str:
        """The scope as the OpenAPI document names it: ``produce:{group}``."""
        if self.action is None:
            return self.note
        return self.action if self.param is None else f"{self.action}:{{{self.param}}}"


OPEN = Access(open=True)
ADMIN_ONLY = Access(action=ADMIN)


def _declare(access: Access) -> Callable[[F], F]:
    def decorate(view: F) -> F:
        view.access = access  # type: ignore[attr-defined]
        return view

    return decorate


def public(view: F) -> F:
    return _declare(OPEN)(view)


def access_of(view: Callable[..., Any]) -> Access | None:
    """A view's declaration (None: it declares nothing, and is treated as admin only)."""
    return getattr(view, "access", None)


def route_access(view: Callable[..., Any]) -> Access:
    """What a Flask view's route needs: its declaration, else admin only."""
    return access_of(view) or ADMIN_ONLY


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (RFC 6750), if any."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def unauthenticated(token: str | None) -> Unauthenticated:
    if token is None:
        return Unauthenticated("this request needs an Authorization: Bearer <token> header",
                               token_given=False)
    return Unauthenticated("the bearer token is unknown or revoked", token_given=True)


def authorize(access: Access, principal: Principal, params: Mapping[str, Any]) -> None:
    """Refuse (403) a principal whose scopes do not allow the route's action."""
    if access.action is None:
        return
    name = params.get(access.param) if access.param is not None else None
    if not allows(principal.scopes, access.action, name):
        scope = access.action if name is None else f"{access.action}:{name}"
        raise Forbidden(f"this token does not have the scope {scope[:200]!r}",
                        required_scope=scope[:200])
