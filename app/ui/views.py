"""The dashboard's pages. Each view is ``@public`` to the API's bearer-token check: the
dashboard checks its own session (``_signed_in``) and each page checks the viewer's
scopes itself, as the API's routes would."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Response,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    send_from_directory,
    session,
    url_for,
)
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from app.api.access import public
from app.api.http import state
from app.domain import dashboard, reads, states, tokens, ui_sessions
from app.domain.access import ADMIN, CONSUME, PRODUCE, UNRESTRICTED, Principal, names_allowed
from app.domain.names import (
    DISCARD_TOPIC,
    check_group_name,
    check_readable_topic,
    check_transaction_id,
)
from app.errors import ApiError, Forbidden, InvalidRequest
from app.problems import ProblemCode
from app.vocabulary import Op, State

STATIC = Path(__file__).parent / "static"
SESSION_ID = "sid"  # the cookie's key for the server-side session's id
# in the order offered: for a DISCARDED transaction, resume-check (its producer decides)
# comes first; a commit the operator decides alone is the last resort, after the barrier
ACTIONS = {"resume-check": Op.RESUME, "commit": Op.COMMIT, "rollback": Op.ROLLBACK}
# the confirmation form's field where a commit's transaction id is typed again
TYPED_ID = "typed_transaction_id"
# what each action says (which state it may follow: the state machine, app.domain.states)
EXPLAINED = {
    Op.COMMIT: "Its messages become visible to readers, at the next offsets of their topics.",
    Op.ROLLBACK: "Its messages are dropped for good; readers never see them.",
    Op.RESUME: "It goes back to PREPARED with its check count at 0, and its producer is "
               "asked again.",
}
SOURCE = "dashboard"  # the op log's source of what an operator does here

bp = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates")
csrf = CSRFProtect()


# -- who is looking ----------------------------------------------------------------------

def viewer() -> Principal:
    principal: Principal = g.ui_principal
    return principal


def _session_principal() -> Principal | None:
    session_id = session.get(SESSION_ID)
    if isinstance(session_id, str):
        return ui_sessions.session_principal(state().engine, session_id)
    return None


def _end_session() -> None:
    """End this browser's session on the server (every process), and forget it here."""
    session_id = session.get(SESSION_ID)
    if isinstance(session_id, str):
        ui_sessions.end_session(state().engine, session_id)
    session.clear()


@bp.before_request
def _signed_in() -> BaseResponse | None:
    """Sign-in first (when access control is on), and a valid CSRF token on every POST."""
    if request.endpoint == "ui.static":
        return None
    if request.method == "POST":
        csrf.protect()
    if not state().guard.enabled:
        g.ui_principal = UNRESTRICTED
        return None
    if request.endpoint == "ui.sign_in":
        return None
    principal = _session_principal()
    if principal is None:
        session.pop(SESSION_ID, None)
        return redirect(url_for("ui.sign_in", next=request.full_path.rstrip("?")))
    g.ui_principal = principal
    return None


# nothing but this site's own stylesheet, forms posting back here, and never inside a frame
# (a framed confirmation button could be clicked by a page that hides it)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@bp.after_request
def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    if request.endpoint != "ui.static":  # pages show live data, some of it sensitive
        response.headers["Cache-Control"] = "no-store"
    return response


@bp.app_template_global()
def may(action: str, name: str | None = None) -> bool:
    return viewer().may(action, name)


@bp.context_processor
def _context() -> dict[str, Any]:
    principal = g.get("ui_principal")
    return {"access_on": state().guard.enabled, "signed_in": principal is not None,
            "States": State, "DISCARD_TOPIC": DISCARD_TOPIC, "ADMIN": ADMIN,
            "PRODUCE": PRODUCE, "CONSUME": CONSUME}


@bp.app_template_filter("ts")
def _timestamp(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") + "Z" if value is not None else "–"


@bp.app_template_filter("age")
def _age(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _refuse(scope: str) -> Forbidden:
    return Forbidden(f"this token does not have the scope {scope[:200]!r}",
                     required_scope=scope[:200])


def _require(action: str, name: str | None = None) -> None:
    if not viewer().may(action, name):
        raise _refuse(action if name is None else f"{action}:{name}")


# -- errors: pages, not problem+json -----------------------------------------------------

def _error_page(status: int, title: str, detail: str) -> tuple[str, int]:
    return render_template("error.html", status=status, title=title, detail=detail), status


@bp.errorhandler(ApiError)
def _api_error(exc: ApiError) -> tuple[str, int]:
    return _error_page(exc.status, exc.title, exc.detail)


@bp.errorhandler(CSRFError)
def _csrf_error(exc: CSRFError) -> tuple[str, int]:
    return _error_page(400, "The form has expired",
                       f"{exc.description} Reload the page and try again; nothing was changed.")


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> tuple[str, int]:
    return _error_page(exc.code or 500, exc.name, exc.description or exc.name)


# -- signing in and out ------------------------------------------------------------------

def _local(target: str | None) -> str:
    """Where to go after signing in: a dashboard path, never another site."""
    if target:
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc and parts.path.startswith("/ui/"):
            return target
    return url_for("ui.overview")


@bp.route("/sign-in", methods=["GET", "POST"])
@public
def sign_in() -> BaseResponse | tuple[str, int]:
    """Sign in with a token (the admin token or one made by the admin)."""
    if not state().guard.enabled:
        return redirect(url_for("ui.overview"))
    target = _local(request.values.get("next"))
    if request.method == "GET":
        return render_template("sign_in.html", next=target), 200
    token = request.form.get("token", "").strip()
    principal = state().guard.verify(token) if token else None
    if principal is None:
        return render_template("sign_in.html", next=target,
                               error="That token is unknown or revoked."), 401
    _end_session()  # a new session: nothing carried over from before signing in
    session.permanent = True
    session[SESSION_ID] = ui_sessions.open_session(state().engine, principal,
                                                   current_app.permanent_session_lifetime)
    return redirect(target, 303)


@bp.post("/sign-out")
@public
def sign_out() -> BaseResponse:
    _end_session()
    return redirect(url_for("ui.sign_in") if state().guard.enabled else url_for("ui.overview"),
                    303)


@bp.get("/static/<path:filename>")
@public
def static(filename: str) -> Response:
    response = send_from_directory(STATIC, filename, max_age=3600)
    return response


# -- pages -------------------------------------------------------------------------------

def _only(action: str) -> frozenset[str] | None:
    return names_allowed(viewer().scopes, action)


@bp.get("/")
@public
def overview() -> str:
    """Topics, transactions by state, the oldest PREPARED one, the last hour's checks."""
    view = dashboard.overview(state().reader, _only(PRODUCE), _only(CONSUME))
    waiting = dashboard.subscriptions_with_backlog(state().reader, _only(CONSUME))
    return render_template("overview.html", view=view, waiting=waiting,
                           waiting_limit=dashboard.OVERVIEW_SUBSCRIPTIONS)


def _before() -> int | None:
    raw = request.args.get("before", "")
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidRequest(f"before must be a transaction's number, got {raw[:40]!r}",
                             code=ProblemCode.INVALID_QUERY_PARAMETER, parameter="before")
    return int(raw)


def _transactions_page(title: str, fixed_state: State | None) -> str:
    group = dashboard.parse_group(request.args.get("group"))
    wanted = fixed_state or dashboard.parse_state(request.args.get("state"))
    search = request.args.get("q", "").strip() or None
    page = dashboard.transactions(state().reader, _only(PRODUCE), group=group, state=wanted,
                                  search=search, before=_before())
    return render_template("transactions.html", title=title, page=page, group=group,
                           state=wanted, search=search, fixed_state=fixed_state,
                           endpoint=request.endpoint)


@bp.get("/transactions")
@public
def transactions() -> str:
    """Transactions newest first; by group and state, or a search by id."""
    return _transactions_page("Transactions", None)


@bp.get("/discarded")
@public
def discarded() -> str:
    """DISCARDED transactions (checked the most times without an answer), to resume,
    commit or roll back."""
    return _transactions_page("Discarded transactions", State.DISCARDED)


@bp.get("/transactions/<group>/<transaction_id>")
@public
def transaction(group: str, transaction_id: str) -> str:
    """A transaction: messages, every check, its timeline; the actions its state allows."""
    check_group_name(group)
    check_transaction_id(transaction_id)
    _require(PRODUCE, group)
    view = dashboard.transaction(state().reader, group, transaction_id)
    offered = [(name, op) for name, op in ACTIONS.items()
               if states.offered(State(view.transaction.state), op)]
    return render_template("transaction.html", view=view, offered=offered)


@bp.route("/transactions/<group>/<transaction_id>/<any(commit,rollback,'resume-check'):action>",
          methods=["GET", "POST"])
@public
def act(group: str, transaction_id: str, action: str) -> BaseResponse | str | tuple[str, int]:
    """An operator's commit, rollback or resume-check: a confirmation page, then the POST
    of its form, through the same ``Lifecycle.finish`` as the API. A commit's form carries
    the transaction id typed by the operator; another id (or none) commits nothing."""
    check_group_name(group)
    check_transaction_id(transaction_id)
    _require(PRODUCE, group)
    op = ACTIONS[action]
    back = url_for("ui.transaction", group=group, transaction_id=transaction_id)
    if request.method == "GET":
        view = dashboard.transaction(state().engine, group, transaction_id)
        return render_template("confirm.html", view=view, action=action, op=op,
                               explained=EXPLAINED[op], back=back, typed_id=TYPED_ID)
    if op is Op.COMMIT and request.form.get(TYPED_ID, "").strip() != transaction_id:
        # a commit publishes what the producer never confirmed: the id typed again says
        # the operator means this transaction, not the one on the next line
        typed = request.form.get(TYPED_ID, "").strip()
        view = dashboard.transaction(state().engine, group, transaction_id)
        refused = (f"The id typed ({typed[:80]!r}) is not this transaction's id: nothing was "
                   "committed. Type its id exactly to commit it." if typed else
                   "Type the transaction's id to commit it: nothing was committed.")
        return render_template("confirm.html", view=view, action=action, op=op,
                               explained=EXPLAINED[op], back=back, typed_id=TYPED_ID,
                               refused=refused), 422
    try:
        result = state().lifecycle.finish(group, transaction_id, op, source=SOURCE)
    except ApiError as exc:
        if exc.status != 409:
            raise
        flash(exc.detail, "error")
    else:
        done = result.body["state"]
        flash(f"Transaction {transaction_id} is {done} now." if result.applied
              else f"Transaction {transaction_id} was already {done}.", "ok")
    return redirect(back, 303)


@bp.get("/topics")
@public
def topics() -> str:
    """Topics the viewer may read, with their offsets and last hour's messages."""
    return render_template("topics.html",
                           lines=dashboard.topics(state().reader, _only(CONSUME)))


@bp.get("/topics/<topic>")
@public
def topic(topic: str) -> str:
    """A page of a topic's messages by offset (the latest by default)."""
    check_readable_topic(topic)
    _require(CONSUME, topic)
    raw = request.args.get("from_offset", "")
    if raw and (not raw.isdigit() or len(raw) > 18):
        raise InvalidRequest(f"from_offset must be an offset, got {raw[:40]!r}",
                             code=ProblemCode.INVALID_QUERY_PARAMETER, parameter="from_offset")
    page = dashboard.browse(state().reader, topic, int(raw) if raw else None)
    subscriptions = dashboard.topic_subscriptions(state().reader, topic)
    return render_template("topic.html", page=page, limit=dashboard.PAGE,
                           subscriptions=subscriptions)


@bp.post("/topics/<topic>/redrive")
@public
def redrive(topic: str) -> BaseResponse:
    """An operator's redrive of this dead-letter topic (``app.domain.redrive``, as
    ``txmsg dead-letters redrive``): its form's offsets and target topic, admin only."""
    from app.domain import redrive as redrives

    check_readable_topic(topic)
    _require(ADMIN)
    first, last = redrives.parse_offsets(request.form.get("offsets", "").strip() or None)
    to = request.form.get("to", "").strip() or None
    app_state = state()
    try:
        done = redrives.redrive(app_state.engine, app_state.lifecycle, topic, first=first,
                                last=last, to=to, source=SOURCE)
    except ApiError as exc:
        if exc.status not in (400, 409):
            raise
        flash(exc.detail, "error")
    else:
        flash(f"{len(done['redriven'])} dead letter(s) redriven.", "ok")
    return redirect(url_for("ui.topic", topic=topic), 303)


@bp.get("/messages/<message_id>")
@public
def message(message_id: str) -> str:
    """A message: where it is, its transaction, its properties and body."""
    if len(message_id) > 64 or not message_id.isalnum():
        raise InvalidRequest(f"{message_id[:64]!r} is not a message id",
                             code=ProblemCode.INVALID_MESSAGE_ID)
    shown = dashboard.message(state().reader, message_id)
    if not any(viewer().may(CONSUME, e["topic"]) for e in shown["discarded_to"]):
        reads.check_may_read(viewer(), shown, message_id)
    return render_template("message.html", m=shown)


@bp.get("/groups")
@public
def groups() -> str:
    """Registered producer groups with their check callbacks."""
    after = request.args.get("after", "")
    if after:
        dashboard.parse_group(after)
    shown, following = dashboard.groups(state().reader, _only(PRODUCE), after)
    return render_template("groups.html", groups=shown, following=following)


@bp.get("/tokens")
@public
def token_list() -> str:
    """The tokens (admin only), without their secrets."""
    _require(ADMIN)
    listed = tokens.list_tokens(state().engine, 0, 1000)
    return render_template("tokens.html", tokens=listed["tokens"])


@bp.get("/<path:rest>")
@public
def unknown(rest: str) -> tuple[str, int]:
    return _error_page(404, "Not Found", f"The dashboard has no page /ui/{rest[:200]}.")
