"""Bad input the API must refuse, one case each: the request, and the status and stable
problem code it gets. The cases assume the state ``SEED`` makes (a registered group with
one PREPARED and one ROLLED_BACK transaction) and a body limit of ``MAX_BODY`` bytes."""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import pytest

MAX_BODY = 64  # TXMSG_MAX_BODY_BYTES for these tests
GROUP = "orders-svc"
SEND = f"/v1/producer-groups/{GROUP}/transactions"
TXN = f"/v1/producer-groups/{GROUP}/transactions"
GROUP_URL = f"/v1/producer-groups/{GROUP}"
TOKENS = "/v1/tokens"
MSG = {"topic": "orders", "body": "hello"}
UNSET: Any = object()


# (method, path, JSON body, expected status), in order
SEED = [
    ("PUT", GROUP_URL, {"check_urls": ["http://127.0.0.1:9/check"]}, 200),
    ("POST", SEND, {"transaction_id": "t-open", **MSG}, 201),
    ("POST", SEND, {"transaction_id": "t-rolled", **MSG}, 201),
    ("POST", f"{TXN}/t-rolled/rollback", None, 200),
]


class Case(NamedTuple):
    id: str
    method: str
    path: str
    status: int
    code: str
    json: Any = UNSET
    data: bytes | None = None


def case(id: str, method: str, path: str, status: int, code: str, json: Any = UNSET,
         data: bytes | None = None) -> Any:
    return pytest.param(Case(id, method, path, status, code, json, data), id=id)


def send(id: str, json: Any, code: str, status: int = 400) -> Any:
    return case(id, "POST", SEND, status, code, json=json)


def put_group(id: str, json: Any, code: str) -> Any:
    return case(id, "PUT", GROUP_URL, 400, code, json=json)


def token(id: str, json: Any, code: str) -> Any:
    return case(id, "POST", TOKENS, 400, code, json=json)


def with_msg(**fields: Any) -> dict[str, Any]:
    return {**MSG, **fields}


def b64(n: int) -> str:
    return base64.b64encode(b"\x01" * n).decode()


URLS = {"check_urls": ["http://127.0.0.1:9/check"]}

CASES = [
    # malformed JSON and bodies that are not objects
    case("json-garbage", "POST", SEND, 400, "invalid_json", data=b"{not json"),
    case("json-truncated", "POST", SEND, 400, "invalid_json", data=b'{"topic": "orders"'),
    case("json-empty", "POST", SEND, 400, "invalid_json", data=b""),
    case("json-not-utf8", "POST", SEND, 400, "invalid_json", data=b'{"topic": "\xff"}'),
    case("json-nan", "POST", SEND, 400, "invalid_json", data=b'{"topic": NaN}'),
    case("json-lone-surrogate", "POST", SEND, 400, "invalid_json",
         data=b'{"topic": "orders", "body": "\\ud800"}'),
    case("group-json-garbage", "PUT", GROUP_URL, 400, "invalid_json", data=b"[1,"),
    send("body-list", [MSG], "invalid_body_type"),
    send("body-string", "orders", "invalid_body_type"),
    send("body-number", 5, "invalid_body_type"),
    case("body-null", "POST", SEND, 400, "invalid_body_type", data=b"null"),
    put_group("group-body-list", ["http://127.0.0.1:9/check"], "invalid_body_type"),
    # missing fields, unknown fields, wrong types (strict: no coercion)
    send("empty-object", {}, "missing_field"),
    send("message-without-topic", {"messages": [{"body": "x"}]}, "missing_field"),
    send("deliver-at-year-9999", with_msg(deliver_at="9999-12-31T23:59:59Z"), "out_of_range"),
    send("deliver-at-past-the-calendar", with_msg(deliver_at="0001-01-01T00:00:00+01:00"),
         "invalid_deliver_at"),
    send("unknown-top-field", with_msg(colour="red"), "unknown_field"),
    send("unknown-message-field", {"messages": [with_msg(colour="red")]}, "unknown_field"),
    send("messages-and-topic", {"messages": [MSG], "topic": "orders"}, "unknown_field"),
    send("topic-int", with_msg(topic=5), "invalid_type"),
    send("body-int", with_msg(body=5), "invalid_type"),
    send("body-bool", with_msg(body=True), "invalid_type"),
    send("body-base64-int", {"topic": "orders", "body_base64": 5}, "invalid_type"),
    send("keys-string", with_msg(keys="k1"), "invalid_type"),
    send("keys-int-item", with_msg(keys=["k1", 5]), "invalid_type"),
    send("keys-too-many", with_msg(keys=[f"k{i}" for i in range(129)]), "invalid_length"),
    send("tag-int", with_msg(tag=5), "invalid_type"),
    send("tag-too-long", with_msg(tag="t" * 1025), "invalid_length"),
    send("tag-nul", with_msg(tag="a\x00b"), "invalid_tag"),
    send("ordering-key-empty", with_msg(ordering_key=""), "invalid_ordering_key"),
    send("ordering-key-too-long", with_msg(ordering_key="k" * 257), "invalid_ordering_key"),
    send("ordering-key-int", with_msg(ordering_key=5), "invalid_ordering_key"),
    send("ordering-key-list", with_msg(ordering_key=["k"]), "invalid_ordering_key"),
    send("ordering-key-nul", with_msg(ordering_key="a\x00b"), "invalid_ordering_key"),
    send("ordering-key-in-messages", {"messages": [MSG, with_msg(ordering_key="")]},
         "invalid_ordering_key"),
    send("properties-list", with_msg(properties=["a"]), "invalid_type"),
    send("properties-int-value", with_msg(properties={"a": 5}), "invalid_type"),
    send("messages-string", {"messages": "x"}, "invalid_type"),
    send("messages-int-item", {"messages": [5]}, "invalid_type"),
    send("immunity-string", with_msg(check_immunity_seconds="5"), "invalid_type"),
    send("immunity-bool", with_msg(check_immunity_seconds=True), "invalid_type"),
    send("immunity-float", with_msg(check_immunity_seconds=5.0), "invalid_type"),
    send("immunity-negative", with_msg(check_immunity_seconds=-1), "out_of_range"),
    send("txid-int", with_msg(transaction_id=5), "invalid_type"),
    send("txid-empty", with_msg(transaction_id=""), "invalid_transaction_id"),
    send("txid-space", with_msg(transaction_id="a b"), "invalid_transaction_id"),
    send("txid-slash", with_msg(transaction_id="a/b"), "invalid_transaction_id"),
    send("txid-129", with_msg(transaction_id="t" * 129), "invalid_transaction_id"),
    # topic names and reserved topics
    send("topic-space", with_msg(topic="bad topic"), "invalid_topic"),
    send("topic-empty", with_msg(topic=""), "invalid_topic"),
    send("topic-slash", with_msg(topic="a/b"), "invalid_topic"),
    send("topic-dot", with_msg(topic="a.b"), "invalid_topic"),
    send("topic-non-ascii", with_msg(topic="zamówienia"), "invalid_topic"),
    send("topic-128", with_msg(topic="t" * 128), "invalid_topic"),
    send("topic-rmq-sys", with_msg(topic="RMQ_SYS_TRANS_HALF_TOPIC"), "reserved_topic"),
    send("topic-rmq-sys-prefix", with_msg(topic="RMQ_SYS_"), "reserved_topic"),
    send("topic-discard", with_msg(topic="TRANS_CHECK_MAX_TIME_TOPIC"), "reserved_topic"),
    send("topic-reserved-second", {"messages": [MSG, with_msg(topic="RMQ_SYS_X")]},
         "reserved_topic"),
    case("read-rmq-sys", "GET", "/v1/topics/RMQ_SYS_TRANS_OP_HALF_TOPIC/messages", 400,
         "reserved_topic"),
    case("read-bad-topic", "GET", "/v1/topics/bad%20topic/messages", 400, "invalid_topic"),
    case("read-topic-128", "GET", f"/v1/topics/{'t' * 128}/messages", 400, "invalid_topic"),
    # producer group names, on every route that takes one
    put_group("put-group-ok-name-bad-url", {"check_urls": ["nope"]}, "invalid_callback_url"),
    case("put-bad-group", "PUT", "/v1/producer-groups/bad%20group", 400,
         "invalid_producer_group", json=URLS),
    case("put-group-128", "PUT", f"/v1/producer-groups/{'g' * 128}", 400,
         "invalid_producer_group", json=URLS),
    case("get-bad-group", "GET", "/v1/producer-groups/a.b", 400, "invalid_producer_group"),
    case("delete-bad-group", "DELETE", "/v1/producer-groups/a.b", 400,
         "invalid_producer_group"),
    case("send-bad-group", "POST", "/v1/producer-groups/a.b/transactions", 400,
         "invalid_producer_group", json=MSG),
    case("commit-bad-group", "POST", "/v1/producer-groups/a.b/transactions/t-open/commit",
         400, "invalid_producer_group"),
    case("list-bad-group", "GET", "/v1/producer-groups/a.b/transactions", 400,
         "invalid_producer_group"),
    # body and body_base64: exactly one, valid base64
    send("body-both", with_msg(body_base64="aGk="), "invalid_body"),
    send("body-neither", {"topic": "orders"}, "invalid_body"),
    send("body-both-null", {"topic": "orders", "body": None, "body_base64": None},
         "invalid_body"),
    send("base64-garbage", {"topic": "orders", "body_base64": "not base64!"}, "invalid_base64"),
    send("base64-bad-padding", {"topic": "orders", "body_base64": "aGk"}, "invalid_base64"),
    send("base64-non-ascii", {"topic": "orders", "body_base64": "aGé="}, "invalid_base64"),
    # bodies over TXMSG_MAX_BODY_BYTES (measured in bytes, after base64 decoding) -> 413
    send("body-too-large", with_msg(body="x" * (MAX_BODY + 1)), "body_too_large", 413),
    send("body-too-large-utf8", with_msg(body="é" * (MAX_BODY // 2 + 1)), "body_too_large",
         413),
    send("base64-too-large", {"topic": "orders", "body_base64": b64(MAX_BODY + 1)},
         "body_too_large", 413),
    send("second-message-too-large",
         {"messages": [MSG, with_msg(body="x" * (MAX_BODY + 1))]}, "body_too_large", 413),
    # properties: at most 128 entries, 16 KiB in all
    send("properties-129", with_msg(properties={f"k{i}": "v" for i in range(129)}),
         "too_many_properties"),
    send("properties-16k", with_msg(properties={"k": "v" * (16 * 1024)}),
         "properties_too_large"),
    # 1..1000 messages
    send("messages-0", {"messages": []}, "invalid_length"),
    send("messages-1001", {"messages": [MSG] * 1001}, "invalid_length"),
    # check URLs: 1..16 absolute http(s) URLs, timeout 100..60000
    # a registered group's change may leave its URLs out; a new group needs them
    case("check-urls-missing", "PUT", "/v1/producer-groups/not-yet", 400, "missing_field",
         json={"check_timeout_ms": 3000}),
    put_group("check-urls-empty", {"check_urls": []}, "invalid_length"),
    put_group("check-urls-17", {"check_urls": [f"http://h{i}:9/c" for i in range(17)]},
              "invalid_length"),
    put_group("check-urls-string", {"check_urls": "http://127.0.0.1:9/check"}, "invalid_type"),
    put_group("check-urls-int-item", {"check_urls": [5]}, "invalid_type"),
    put_group("check-url-ftp", {"check_urls": ["ftp://127.0.0.1/check"]}, "invalid_callback_url"),
    put_group("check-url-relative", {"check_urls": ["/check"]}, "invalid_callback_url"),
    put_group("check-url-no-scheme", {"check_urls": ["127.0.0.1:9/check"]},
              "invalid_callback_url"),
    put_group("check-url-no-host", {"check_urls": ["http:///check"]}, "invalid_callback_url"),
    put_group("check-url-bad-ipv6", {"check_urls": ["http://[::1/check"]},
              "invalid_callback_url"),
    put_group("check-url-bad-port", {"check_urls": ["http://127.0.0.1:99999/check"]},
              "invalid_callback_url"),
    put_group("check-url-second-bad", {"check_urls": ["http://127.0.0.1:9/c", "mailto:a@b"]},
              "invalid_callback_url"),
    put_group("timeout-99", {**URLS, "check_timeout_ms": 99}, "out_of_range"),
    put_group("timeout-60001", {**URLS, "check_timeout_ms": 60001}, "out_of_range"),
    put_group("timeout-string", {**URLS, "check_timeout_ms": "3000"}, "invalid_type"),
    put_group("timeout-bool", {**URLS, "check_timeout_ms": True}, "invalid_type"),
    put_group("timeout-float", {**URLS, "check_timeout_ms": 3000.0}, "invalid_type"),
    put_group("group-unknown-field", {**URLS, "colour": "red"}, "unknown_field"),
    send("send-check-url-relative", with_msg(check_url="/check"), "invalid_callback_url"),
    send("send-check-url-ftp", with_msg(check_url="ftp://h/c"), "invalid_callback_url"),
    send("send-check-url-nul", with_msg(check_url="http://h\x00/c"), "invalid_callback_url"),
    send("send-check-url-int", with_msg(check_url=5), "invalid_type"),
    # topics: PUT /v1/topics/{topic}
    *[case(f"topic-retention-{name}", "PUT", "/v1/topics/orders", 400, code, json=body)
      for name, body, code in (
          ("below-minimum", {"retention_seconds": 59}, "out_of_range"),
          ("above-maximum", {"retention_seconds": 31_536_001}, "out_of_range"),
          ("negative", {"retention_seconds": -1}, "out_of_range"),
          ("string", {"retention_seconds": "3600"}, "invalid_type"),
          ("bool", {"retention_seconds": True}, "invalid_type"),
          ("float", {"retention_seconds": 3600.5}, "invalid_type"),
          ("missing", {}, "missing_field"),
          ("unknown-field", {"retention_seconds": 3600, "retention_ms": 1}, "unknown_field"),
          ("array", [3600], "invalid_body_type"),
      )],
    case("topic-retention-not-json", "PUT", "/v1/topics/orders", 400, "invalid_json",
         data=b"{retention"),
    case("topic-retention-rmq-sys", "PUT", "/v1/topics/RMQ_SYS_TRANS_HALF_TOPIC", 400,
         "reserved_topic", json={"retention_seconds": 3600}),
    case("topic-retention-bad-name", "PUT", "/v1/topics/bad%20topic", 400, "invalid_topic",
         json={"retention_seconds": 3600}),
    case("topic-get-rmq-sys", "GET", "/v1/topics/RMQ_SYS_TRANS_HALF_TOPIC", 400,
         "reserved_topic"),
    case("topic-get-bad-name", "GET", f"/v1/topics/{'t' * 128}", 400, "invalid_topic"),
    case("topic-unknown", "GET", "/v1/topics/orders", 404, "topic_not_found"),
    # callback URLs never carry user info; IP literals are judged by the address policy
    put_group("check-url-user-info", {"check_urls": ["http://u:pw@127.0.0.1:9/c"]},
              "invalid_callback_url"),
    put_group("check-url-user-only", {"check_urls": ["http://u@127.0.0.1:9/c"]},
              "invalid_callback_url"),
    send("send-check-url-user-info", with_msg(check_url="https://u:pw@h/c"),
         "invalid_callback_url"),
    *[put_group(f"check-url-denied-{name}", {"check_urls": [f"http://{host}/c"]},
                "callback_url_not_allowed")
      for name, host in (("metadata", "169.254.169.254"), ("metadata-decimal", "2852039166"),
                         ("metadata-octal", "0251.0376.0251.0376"),
                         ("metadata-hex", "0xa9.0xfe.0xa9.0xfe"),
                         ("metadata-short", "169.254.43518"),
                         ("metadata-mapped", "[::ffff:169.254.169.254]"),
                         ("metadata-mapped-hex", "[::ffff:a9fe:a9fe]"),
                         ("alibaba", "100.100.100.200"), ("aws-ipv6", "[fd00:ec2::254]"),
                         ("unspecified", "0.0.0.0"), ("zero", "0"), ("unspecified-v6", "[::]"),
                         ("link-local-v6", "[fe80::1]"), ("multicast", "224.0.0.1"),
                         ("multicast-v6", "[ff02::1]"), ("reserved", "240.0.0.1"))],
    put_group("check-url-second-denied",
              {"check_urls": ["http://127.0.0.1:9/c", "http://169.254.169.254/c"]},
              "callback_url_not_allowed"),
    send("send-check-url-denied", with_msg(check_url="http://169.254.169.254/latest"),
         "callback_url_not_allowed"),
    send("send-check-url-denied-mapped", with_msg(check_url="http://[0:0:0:0:0:ffff:a9fe:a9fe]/c"),
         "callback_url_not_allowed"),
    # query parameters
    *[case(f"read-{q}", "GET", f"/v1/topics/orders/messages?{q}", 400,
           "invalid_query_parameter")
      for q in ("limit=0", "limit=1001", "limit=abc", "limit=", "limit=1.5", "limit=-1",
                "limit=1_0", "limit=%201", "from_offset=-1", "from_offset=x",
                "from_offset=9223372036854775808")],
    *[case(f"list-{q}", "GET", f"{TXN}?{q}", 400, "invalid_query_parameter")
      for q in ("limit=0", "limit=1001", "limit=abc", "state=BOGUS", "state=prepared",
                "state=", "after=-1", "after=x", "after=99999999999999999999")],
    # unknown routes and wrong methods
    case("route-unknown", "GET", "/nope", 404, "route_not_found"),
    case("route-v2", "GET", "/v2/topics", 404, "route_not_found"),
    case("route-topic-subpath", "GET", "/v1/topics/orders/offsets", 404, "route_not_found"),
    case("method-delete-topic", "DELETE", "/v1/topics/orders", 405, "method_not_allowed"),
    case("route-unknown-op", "POST", f"{TXN}/t-open/explode", 404, "route_not_found"),
    case("method-post-topics", "POST", "/v1/topics", 405, "method_not_allowed", json={}),
    case("method-patch-group", "PATCH", GROUP_URL, 405, "method_not_allowed", json=URLS),
    case("method-delete-messages", "DELETE", "/v1/topics/orders/messages", 405,
         "method_not_allowed"),
    case("method-get-commit", "GET", f"{TXN}/t-open/commit", 405, "method_not_allowed"),
    case("method-put-transactions", "PUT", SEND, 405, "method_not_allowed", json=MSG),
    # state: unregistered group, reused transaction id, unknown resources, conflicts
    case("unregistered-group", "POST", "/v1/producer-groups/nobody/transactions", 422,
         "unregistered_producer_group", json=MSG),
    send("txid-reused-other-body", with_msg(transaction_id="t-open", body="bye"),
         "transaction_id_conflict", 409),
    send("txid-reused-other-topic", with_msg(transaction_id="t-open", topic="other"),
         "transaction_id_conflict", 409),
    send("txid-reused-extra-message", {"transaction_id": "t-open", "messages": [MSG, MSG]},
         "transaction_id_conflict", 409),
    send("txid-reused-other-tag", with_msg(transaction_id="t-open", tag="x"),
         "transaction_id_conflict", 409),
    send("txid-reused-other-ordering-key", with_msg(transaction_id="t-open", ordering_key="x"),
         "transaction_id_conflict", 409),
    send("txid-reused-other-immunity", with_msg(transaction_id="t-open",
                                                check_immunity_seconds=60),
         "transaction_id_conflict", 409),
    send("txid-reused-other-check-url", with_msg(transaction_id="t-open",
                                                 check_url="http://127.0.0.1:9/other"),
         "transaction_id_conflict", 409),
    *[case(f"unknown-txn-{op}", "POST", f"{TXN}/t-nope/{op}", 404, "transaction_not_found")
      for op in ("commit", "rollback", "resume-check")],
    case("unknown-txn-get", "GET", f"{TXN}/t-nope", 404, "transaction_not_found"),
    case("txn-other-group", "POST", "/v1/producer-groups/other-svc/transactions/t-open/commit",
         404, "transaction_not_found"),
    case("unknown-group-get", "GET", "/v1/producer-groups/nobody", 404,
         "producer_group_not_found"),
    case("unknown-group-delete", "DELETE", "/v1/producer-groups/nobody", 404,
         "producer_group_not_found"),
    case("unknown-message", "GET", "/v1/messages/0123456789ABCDEF0123456789ABCDEF", 404,
         "message_not_found"),
    case("commit-after-rollback", "POST", f"{TXN}/t-rolled/commit", 409,
         "invalid_state_transition"),
    case("resume-prepared", "POST", f"{TXN}/t-open/resume-check", 409,
         "invalid_state_transition"),
    # ids in paths that no transaction or message can have (PostgreSQL text refuses NUL)
    case("txid-path-nul-get", "GET", f"{TXN}/a%00b", 400, "invalid_transaction_id"),
    case("txid-path-nul-commit", "POST", f"{TXN}/a%00b/commit", 400, "invalid_transaction_id"),
    case("txid-path-129", "POST", f"{TXN}/{'t' * 129}/rollback", 400, "invalid_transaction_id"),
    case("message-id-nul", "GET", "/v1/messages/a%00b", 400, "invalid_message_id"),
    # tokens (access control): the body of POST /v1/tokens and the id of DELETE
    token("token-body-list", ["consume:orders"], "invalid_body_type"),
    case("token-json-garbage", "POST", TOKENS, 400, "invalid_json", data=b"{name"),
    token("token-no-name", {"scopes": ["consume:orders"]}, "missing_field"),
    token("token-no-scopes", {"name": "n"}, "missing_field"),
    token("token-name-empty", {"name": "", "scopes": ["consume:orders"]}, "invalid_token_name"),
    token("token-name-blank", {"name": "  ", "scopes": ["consume:orders"]},
          "invalid_token_name"),
    token("token-name-201", {"name": "n" * 201, "scopes": ["consume:orders"]},
          "invalid_token_name"),
    token("token-name-control", {"name": "a\nb", "scopes": ["consume:orders"]},
          "invalid_token_name"),
    token("token-name-int", {"name": 5, "scopes": ["consume:orders"]}, "invalid_type"),
    token("token-scopes-empty", {"name": "n", "scopes": []}, "invalid_length"),
    token("token-scopes-101", {"name": "n", "scopes": [f"consume:t{i}" for i in range(101)]},
          "invalid_length"),
    token("token-scopes-string", {"name": "n", "scopes": "admin"}, "invalid_type"),
    token("token-scope-int", {"name": "n", "scopes": [1]}, "invalid_type"),
    *[token(f"token-scope-{label}", {"name": "n", "scopes": ["consume:orders", scope]},
            "invalid_scope")
      for label, scope in (("unknown", "read:orders"), ("no-name", "produce:"),
                           ("bare", "consume"), ("bad-name", "consume:bad topic"),
                           ("long-name", f"produce:{'g' * 128}"), ("upper", "ADMIN"),
                           ("admin-name", "admin:orders"), ("glob", "consume:ord*"),
                           ("empty", ""))],
    token("token-unknown-field", {"name": "n", "scopes": ["admin"], "expires": 5},
          "unknown_field"),
    case("token-id-malformed", "DELETE", f"{TOKENS}/not-an-id", 400, "invalid_token_id"),
    case("token-id-upper", "DELETE", f"{TOKENS}/0123456789ABCDEF", 400, "invalid_token_id"),
    case("token-id-unknown", "DELETE", f"{TOKENS}/0123456789abcdef", 404, "token_not_found"),
    *[case(f"tokens-{q}", "GET", f"{TOKENS}?{q}", 400, "invalid_query_parameter")
      for q in ("limit=0", "limit=1001", "after=-1", "after=x")],
]
