"""An operator at the dashboard, in headless Chromium, against a served txmsg: signs in,
finds a discarded transaction, resumes it and sees its producer commit it; commits and
rolls back behind the confirmation; browses a topic and opens messages; reads every
page at phone width; and is refused what a token's scope forbids."""

from __future__ import annotations

import re

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import GROUP, PHONE, Browser, Site
from tests.callbacks import wait_until


def discarded(site: Site, transaction_id: str) -> None:
    """Send a transaction its producer cannot answer for: two UNKNOWN checks, discarded."""
    site.send(transaction_id, immune=False, body=f'{{"order": "{transaction_id}"}}')
    wait_until(lambda: site.state(transaction_id) == "DISCARDED", timeout=60,
               what=f"{transaction_id} to be discarded")


def test_sign_in_find_a_discarded_transaction_resume_it_and_see_it_committed(
        browser: Browser, site: Site) -> None:
    discarded(site, "order-2001")
    browser.open("/ui/discarded")
    browser.wait_heading("Sign in")  # a stranger is sent to sign in first
    browser.driver.find_element(By.ID, "token").send_keys("not-a-token")
    browser.click(By.ID, "sign-in")
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".flash.error"), "the refusal")
    assert "unknown or revoked" in browser.driver.find_element(By.CSS_SELECTOR, ".flash").text
    browser.sign_in()
    assert browser.found(By.ID, "state-DISCARDED")
    browser.shot("overview", readme=True)

    browser.click(By.LINK_TEXT, "Discarded")
    browser.wait_heading("Discarded")
    row = browser.driver.find_element(By.CSS_SELECTOR, 'tr[data-transaction="order-2001"]')
    assert "DISCARDED" in row.text and "2" in row.text
    row.find_element(By.LINK_TEXT, "Resume check…").click()
    browser.wait_heading("Resume checks of transaction")
    assert "goes back to PREPARED" in browser.driver.page_source

    site.producer.will_commit("order-2001")  # the producer answers the next check: COMMIT
    browser.click(By.ID, "confirm")
    browser.wait_heading("Transaction")
    flash = browser.driver.find_element(By.CSS_SELECTOR, ".flash").text
    assert flash == "Transaction order-2001 is PREPARED now."

    def committed(_driver: object) -> bool:
        browser.driver.refresh()
        return browser.driver.find_element(By.ID, "state").text == "COMMITTED"

    browser.wait(committed, "the producer's commit after the resumed check")
    log = browser.driver.find_element(By.ID, "check-log").text
    assert log.count("UNKNOWN") == 2 and "COMMIT" in log and " ms" in log
    assert site.producer.server.url in log
    timeline = browser.driver.find_element(By.ID, "timeline").text
    for event in ("sent", "check #1: UNKNOWN", "check #2: UNKNOWN", "DISCARD", "RESUME",
                  "check #1: COMMIT", "COMMIT"):
        assert event in timeline, event
    assert "by dashboard" in timeline
    browser.shot("transaction", readme=True)
    assert site.state("order-2001") == "COMMITTED"


def test_commit_and_roll_back_behind_the_confirmation(browser: Browser, site: Site) -> None:
    site.send("order-3001")
    site.send("order-3002")
    browser.sign_in()
    browser.open(f"/ui/transactions/{GROUP}/order-3001")
    browser.click(By.ID, "action-commit")
    browser.wait_heading("Commit transaction")
    browser.click(By.ID, "cancel")  # thinking better of it changes nothing
    browser.wait_heading("Transaction")
    assert site.state("order-3001") == "PREPARED"

    browser.click(By.ID, "action-commit")
    browser.wait_heading("Commit transaction")
    typed = browser.driver.find_element(By.ID, "typed_transaction_id")
    typed.send_keys("order-3002")  # the id of the next line: refused, nothing committed
    browser.click(By.ID, "confirm")
    browser.wait(lambda d: d.find_elements(By.ID, "refused"), "the refusal")
    assert "nothing was committed" in browser.driver.find_element(By.ID, "refused").text
    assert site.state("order-3001") == "PREPARED"
    browser.driver.find_element(By.ID, "typed_transaction_id").send_keys("order-3001")
    browser.click(By.ID, "confirm")
    browser.wait_heading("Transaction")  # the refusal's page, with its .flash, is gone
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".flash"), "the outcome")
    assert browser.driver.find_element(By.ID, "state").text == "COMMITTED"
    assert not browser.found(By.ID, "actions")
    assert site.state("order-3001") == "COMMITTED"

    browser.open(f"/ui/transactions?group={GROUP}&state=PREPARED")
    browser.click(By.LINK_TEXT, "order-3002")
    browser.wait_heading("Transaction")
    browser.click(By.ID, "action-rollback")
    browser.wait_heading("Roll back transaction")
    browser.click(By.ID, "confirm")
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".flash"), "the outcome")
    assert browser.driver.find_element(By.ID, "state").text == "ROLLED_BACK"
    assert site.state("order-3002") == "ROLLED_BACK"


def test_browse_a_topic_and_open_its_messages(browser: Browser, site: Site) -> None:
    browser.sign_in()
    browser.click(By.LINK_TEXT, "Topics")
    browser.wait_heading("Topics")
    browser.click(By.LINK_TEXT, "orders")
    browser.wait_heading("Topic orders")
    offsets = [int(r.get_attribute("data-offset") or -1) for r in
               browser.driver.find_elements(By.CSS_SELECTOR, "#topic-messages tbody tr")]
    assert offsets == sorted(offsets) and offsets[0] == 0 and len(offsets) >= 12
    browser.driver.find_element(By.ID, "from-offset").clear()
    browser.driver.find_element(By.ID, "from-offset").send_keys("3")
    browser.click(By.ID, "go")
    browser.wait(lambda d: d.find_element(By.CSS_SELECTOR, "#topic-messages tbody tr")
                 .get_attribute("data-offset") == "3", "the page from offset 3")
    browser.shot("topic")
    browser.click(By.LINK_TEXT, "3")
    browser.wait_heading("Message")
    assert browser.driver.find_element(By.ID, "offset").text == "3"
    assert browser.driver.find_element(By.ID, "body").text == \
        '{"order": 1003, "total": "22.90 EUR"}'

    browser.open("/ui/topics/payments")
    browser.wait_heading("Topic payments")
    browser.click(By.LINK_TEXT, "0")
    browser.wait_heading("Message")
    assert "binary" in browser.driver.find_element(By.TAG_NAME, "main").text
    assert browser.driver.find_element(By.ID, "body").text.startswith("89 50 4e 47 0d 0a 1a 0a")


def test_every_page_fits_a_phone(browser: Browser, site: Site) -> None:
    browser.sign_in()
    message = site.api("GET", "/v1/topics/orders/messages?limit=1")["messages"][0]
    browser.driver.set_window_size(*PHONE)
    width = browser.driver.execute_script("return window.innerWidth")
    assert width <= 400
    for name, path in [("overview", "/ui/"), ("transactions", "/ui/transactions"),
                       ("discarded", "/ui/discarded"), ("transaction",
                                                        f"/ui/transactions/{GROUP}/order-1000"),
                       ("confirm", f"/ui/transactions/{GROUP}/order-1000/rollback"),
                       ("topics", "/ui/topics"), ("topic", "/ui/topics/orders"),
                       ("message", f"/ui/messages/{message['message_id']}"),
                       ("groups", "/ui/groups"), ("tokens", "/ui/tokens")]:
        browser.open(path)
        browser.wait(lambda d: d.find_elements(By.TAG_NAME, "h1"), path)
        assert browser.overflow() <= 0, path
        styled = browser.driver.execute_script(  # the stylesheet passed the page's CSP
            "return getComputedStyle(document.querySelector('header')).backgroundColor")
        assert styled == "rgb(24, 32, 42)", path
        browser.shot(f"phone-{name}")


def test_a_token_without_the_scope_is_refused_and_sees_no_button(
        browser: Browser, site: Site) -> None:
    discarded(site, "order-4001")
    reader = site.api("POST", "/v1/tokens", json={
        "name": "discard watcher", "scopes": ["consume:TRANS_CHECK_MAX_TIME_TOPIC"]})["token"]
    browser.sign_in(reader)
    assert not browser.found(By.LINK_TEXT, "Tokens")
    browser.open("/ui/topics/TRANS_CHECK_MAX_TIME_TOPIC")
    browser.wait_heading("Topic TRANS_CHECK_MAX_TIME_TOPIC")
    row = [r for r in browser.driver.find_elements(By.CSS_SELECTOR, "#topic-messages tbody tr")
           if "order-4001" in r.text][-1]
    row.find_element(By.CSS_SELECTOR, "td a").click()
    browser.wait_heading("Message")
    main = browser.driver.find_element(By.TAG_NAME, "main").text
    assert "order-4001" in main and "DISCARDED" in main and "REAL_TOPIC" in main
    assert not browser.found(By.ID, "action-resume-check")  # hidden: not its scope

    browser.open(f"/ui/transactions/{GROUP}/order-4001/resume-check")
    browser.wait_heading("403")
    assert f"produce:{GROUP}" in browser.driver.find_element(By.ID, "error-detail").text
    browser.shot("forbidden")
    assert site.state("order-4001") == "DISCARDED"


@pytest.mark.parametrize("path", ["/ui/", "/ui/transactions/orders-svc/order-1000"])
def test_signing_out_ends_the_session(browser: Browser, site: Site, path: str) -> None:
    browser.sign_in()
    browser.open(path)
    browser.wait(lambda d: d.find_elements(By.TAG_NAME, "h1"), path)
    browser.click(By.CSS_SELECTOR, ".sign-out button")
    browser.wait_heading("Sign in")
    browser.open(path)
    browser.wait_heading("Sign in")
    assert re.search(r"next=", browser.driver.current_url)


def test_the_api_browser_shows_every_operation_of_the_document(browser: Browser,
                                                               site: Site) -> None:
    """GET /docs in a real browser: Swagger UI (OpenAPI 3.1) renders the document, under
    its own Content-Security-Policy, with nothing fetched from another host."""
    browser.open("/docs")
    operations = browser.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"), "the operations")
    paths = {op.get_attribute("data-path") for op in operations}
    assert {"/v1/producer-groups/{group}/transactions", "/openapi.json"} <= paths
    assert not browser.found(By.CSS_SELECTOR, ".errors-wrapper")
    loaded = browser.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(site.url) for url in loaded), loaded
