"""The dashboard in a real browser: Debian's headless Chromium driven by its chromedriver
(Selenium), against a real ``txmsg serve`` with access control on and its embedded
checker, whose check callbacks go to a server of the test's own.

Chromium and chromedriver come from Debian (``scripts/ensure-system-deps.sh``, run by
``make install``); nothing here downloads a browser. Screenshots go to a temporary
directory; with ``TXMSG_UPDATE_SCREENSHOTS=1`` the README's two are rewritten under
``docs/images/``.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.acceptance.conftest import Served, start_serve
from tests.callbacks import CallbackServer, Reply, answer

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,900"]
DESKTOP, PHONE = (1280, 900), (375, 812)
ADMIN_TOKEN = "browser-admin-token-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GROUP = "orders-svc"
WAIT = 30.0  # seconds a page may take under a loaded machine
REPO = Path(__file__).resolve().parents[2]


class Producer:
    """The producer's check callback: UNKNOWN, but COMMIT for the transactions named in
    ``commit`` (a transaction discarded, resumed, then committed by its producer)."""

    def __init__(self) -> None:
        self.commit: set[str] = set()
        self._lock = threading.Lock()
        self.server = CallbackServer(self._reply)

    def will_commit(self, transaction_id: str) -> None:
        with self._lock:
            self.commit.add(transaction_id)

    def _reply(self, check: dict[str, Any]) -> Reply:
        with self._lock:
            decided = check["transaction_id"] in self.commit
        return answer("COMMIT" if decided else "UNKNOWN")


class Site:
    """The served dashboard and the API beside it."""

    def __init__(self, served: Served, producer: Producer) -> None:
        self.served, self.producer = served, producer
        self.url = served.url
        self.http = requests.Session()
        self.http.headers.update(AS_ADMIN)

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self.http.request(method, f"{self.url}{path}", timeout=30, **kwargs)
        assert r.status_code < 300, (path, r.status_code, r.text)
        return r.json() if r.content else None

    def send(self, transaction_id: str, *, group: str = GROUP, commit: bool = False,
             immune: bool = True, **message: Any) -> dict[str, Any]:
        """A transaction of one message; ``immune``: never checked while the test runs."""
        body = {"transaction_id": transaction_id, "topic": "orders", "body": "{}",
                "check_immunity_seconds": 86400 if immune else 0, **message}
        body = {k: v for k, v in body.items() if v is not None}
        sent: dict[str, Any] = self.api("POST", f"/v1/producer-groups/{group}/transactions",
                                        json=body)
        if commit:
            self.api("POST", f"/v1/producer-groups/{group}/transactions/{transaction_id}/commit")
        return sent

    def state(self, transaction_id: str, group: str = GROUP) -> str:
        state: str = self.api("GET", f"/v1/producer-groups/{group}/transactions/"
                                     f"{transaction_id}")["state"]
        return state


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """``txmsg serve`` with an admin token and a checker that discards a transaction after
    two unanswered checks, half a second apart; a few groups, topics and transactions."""
    producer = Producer()
    env = {"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN, "TXMSG_CHECK_MAX_TIMES": "2",
           "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0", "TXMSG_CHECK_INTERVAL_SECONDS": "0.5"}
    served = start_serve(env, tmp_path_factory.mktemp("browser"))
    try:
        site = Site(served, producer)
        seed(site)
        yield site
    finally:
        served.stop()
        producer.server.close()


def seed(site: Site) -> None:
    """What an operator would find on a working day (the screenshots show it)."""
    site.api("PUT", f"/v1/producer-groups/{GROUP}",
             json={"check_urls": [site.producer.server.url], "check_timeout_ms": 2000})
    site.api("PUT", "/v1/producer-groups/billing-svc",
             json={"check_urls": ["http://billing.internal:8080/txmsg/check"]})
    for n in range(12):
        site.send(f"order-{1000 + n}", commit=True,
                  body=f'{{"order": {1000 + n}, "total": "{19 + n}.90 EUR"}}', tag="created",
                  keys=[f"order-{1000 + n}"])
    for n in range(5):
        site.send(f"invoice-{n}", group="billing-svc", topic="invoices", commit=n % 4 != 3,
                  body=f'{{"invoice": {n}}}')
    site.send("payment-1", topic="payments", commit=True, body=None,
              body_base64="iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ")


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def chromium() -> Iterator[WebDriver]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} is missing: `make install` (scripts/ensure-system-deps.sh) "
                        "installs Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


class Browser:
    """One person at the dashboard: helpers over the driver."""

    def __init__(self, driver: WebDriver, site: Site, screenshots: Path) -> None:
        self.driver, self.site, self.screenshots = driver, site, screenshots

    def open(self, path: str) -> None:
        self.driver.get(f"{self.site.url}{path}")

    def wait(self, condition: Callable[[WebDriver], Any], what: str) -> Any:
        # a page replaced while it is read (chromedriver says so in several ways, stale
        # elements and nodes no longer in the document among them): read the new one on
        # the next poll
        return WebDriverWait(self.driver, WAIT, poll_frequency=0.1,
                             ignored_exceptions=(WebDriverException,)).until(
            condition, message=f"waiting for {what}")

    def heading(self) -> str:
        """The page's h1, read in one script (no element handle to go stale)."""
        text: str | None = self.driver.execute_script(
            "const h = document.querySelector('h1'); return h && h.textContent.trim();")
        return " ".join((text or "").split())

    def wait_heading(self, starts: str) -> None:
        self.wait(lambda _: self.heading().startswith(starts), f"a page headed {starts!r}")

    def click(self, by: str, value: str) -> None:
        self.driver.find_element(by, value).click()

    def sign_in(self, token: str = ADMIN_TOKEN) -> None:
        self.open("/ui/sign-in")  # cookies are deleted for the page's site
        self.driver.delete_all_cookies()
        self.open("/ui/")
        self.wait_heading("Sign in")
        self.driver.find_element(By.ID, "token").send_keys(token)
        self.click(By.ID, "sign-in")
        self.wait_heading("Overview")

    def found(self, by: str, value: str) -> bool:
        return bool(self.driver.find_elements(by, value))

    def shot(self, name: str, readme: bool = False) -> Path:
        """A screenshot of the whole page (the window grown to its height for it)."""
        path = self.screenshots / f"{name}.png"
        width, height = self.driver.get_window_size().values()
        needed = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(width, max(height, needed + (height - self.driver
                                    .execute_script("return window.innerHeight"))))
        try:
            assert self.driver.save_screenshot(str(path)), name
        finally:
            self.driver.set_window_size(width, height)
        if readme and os.environ.get("TXMSG_UPDATE_SCREENSHOTS") == "1":
            shutil.copy(path, REPO / "docs" / "images" / f"dashboard-{name}.png")
        return path

    def overflow(self) -> int:
        """How far the page is wider than the window (0: no horizontal scrolling)."""
        width: int = self.driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        return width


@pytest.fixture
def browser(chromium: WebDriver, site: Site, screenshots: Path) -> Iterator[Browser]:
    chromium.set_window_size(*DESKTOP)
    yield Browser(chromium, site, screenshots)
    chromium.set_window_size(*DESKTOP)
