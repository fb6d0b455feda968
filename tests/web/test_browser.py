"""The dashboard in a real browser: headless Chromium driven by selenium against a running broker
shows a produced topic, its group's lag and a looked-up message, and leaves screenshots.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y chromium chromium-driver``)
and selenium (the ``test`` extra); skipped with the reason when one is missing. Set
``ROCKETPY_SCREENSHOTS=DIR`` to keep the screenshots (else they go to the test's temp directory).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from rocketpy.web.access import AclAccounts
from tests.acl.test_broker import USER
from tests.web.test_dashboard import DashboardTestCase

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver") if os.path.exists(p)), None)
try:
    import selenium  # noqa: F401

    SELENIUM = True
except ImportError:
    SELENIUM = False

#: The flags of a sandboxed, offline CI machine: nothing leaves loopback, nothing persists.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,800")
WAIT_S = 20


def _skip_reason() -> str | None:
    if not SELENIUM:
        return "selenium is not installed (pip install -e '.[test]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "Chromium or chromedriver not found (apt-get install -y chromium chromium-driver)"
    return None


class Browser:
    """A headless Chromium session; every method blocks (run them in a thread)."""

    def __init__(self, profile: str, shots: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        assert CHROMIUM is not None and CHROMEDRIVER is not None
        options.binary_location = CHROMIUM
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for errors()
        self.driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        self.shots = shots

    def text_of(self, url: str | None, selector: str, until: Callable[[str], bool]) -> str:
        """Open ``url`` (None: stay), wait until the text of ``selector`` satisfies ``until``; that text."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        if url is not None:
            self.driver.get(url)
        found: list[str] = []

        def ready(driver: Any) -> bool:
            found[:] = [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]
            return bool(found) and until(found[0])

        try:
            # a page re-rendered between finding an element and reading it: look again
            WebDriverWait(self.driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(ready)
        except Exception:
            raise AssertionError(f"{selector} at {url}: {found!r}; page: {self.page_text()!r}") from None
        return found[0]

    def submit(self, form: str, **fields: str) -> None:
        """Fill the inputs of ``form`` (a CSS selector) by name and submit it."""
        from selenium.webdriver.common.by import By

        element = self.driver.find_element(By.CSS_SELECTOR, form)
        for name, value in fields.items():
            box = element.find_element(By.NAME, name)
            box.clear()
            box.send_keys(value)
        element.find_element(By.TAG_NAME, "button").click()

    def page_text(self) -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.TAG_NAME, "body").text)[:2000]

    def click_link(self, text: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.LINK_TEXT, text).click()

    def screenshot(self, name: str) -> str:
        path = os.path.join(self.shots, f"{name}.png")
        self.driver.save_screenshot(path)
        return path

    def errors(self) -> list[str]:
        """The page's console errors (uncaught exceptions, failed loads) since the last call."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def quit(self) -> None:
        self.driver.quit()


class BrowserTests(DashboardTestCase):
    skip = _skip_reason()
    timeout = 120

    def start_browser(self) -> tuple[Callable[..., Any], str]:
        """A thread for the blocking browser calls (``in_thread(f, ...)``) and the screenshot directory."""
        shots = os.environ.get("ROCKETPY_SCREENSHOTS") or self.mktemp()
        os.makedirs(shots, exist_ok=True)
        pool = ThreadPool(1, 1, "browser")
        pool.start()
        self.addCleanup(pool.stop)

        def in_thread(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return deferToThreadPool(cast(IReactorFromThreads, reactor), pool, f, *args, **kwargs)

        return in_thread, shots

    async def test_acl_account_in_chromium(self) -> None:
        """With ACL on, a page opened as ``http://key:secret@host/`` (the browser's answer to the
        pages' 401) sends the account with every API request and shows what it may read."""
        cluster = await self.acl_cluster()
        base = await self.dashboard(cluster.namesrv_addr, access=AclAccounts(reactor, cluster.namesrv_addr))
        in_thread, shots = self.start_browser()
        browser: Browser = await in_thread(Browser, self.mktemp(), shots)
        self.addCleanup(in_thread, browser.quit)
        signed_in = base.replace("http://", "http://{}:{}@".format(*USER))
        topics = await in_thread(browser.text_of, signed_in + "/#/topics?system=1", "#topics-table",
                                 lambda t: "TBW102" in t)
        self.assertIn("TBW102", topics)
        await in_thread(browser.screenshot, "acl-topics")

    async def test_topic_lag_and_message_in_chromium(self) -> None:
        """A produced topic is listed, its lagging group shows lag 2, and a message looked up by key
        opens with its body and its consumption by the group; screenshots of each page. With write
        actions on, the topic form creates a topic."""
        cluster = await self.cluster()
        base = await self.dashboard(cluster.namesrv_addr)
        _, _, late = await self.lagging_group(cluster)
        in_thread, shots = self.start_browser()
        browser: Browser = await in_thread(Browser, self.mktemp(), shots)
        self.addCleanup(in_thread, browser.quit)

        topics = await in_thread(browser.text_of, base + "/#/topics", "#topics-table", lambda t: "Watched" in t)
        self.assertRegex(topics, r"Watched 6 \d+\.\d\d 4 DefaultCluster CG")  # messages, TPS, queues, cluster, groups
        await in_thread(browser.screenshot, "topics")
        lag = await in_thread(browser.text_of, base + "/#/group/CG", "#group-lag", lambda t: t != "")
        self.assertEqual(lag, "2")
        queues = await in_thread(browser.text_of, base + "/#/group/CG", "#group-queues", lambda t: "Watched" in t)
        self.assertIn("Watched broker-a", queues)
        await in_thread(browser.screenshot, "group")
        found = await in_thread(browser.text_of, base + "/#/messages?topic=Watched&key=late", "#messages-table",
                                lambda t: late[0].msg_id in t)
        self.assertIn(late[1].msg_id, found)
        await in_thread(browser.click_link, late[0].msg_id)
        body = await in_thread(browser.text_of, base + f"/#/message/Watched/{late[0].msg_id}", "#message-body",
                               lambda t: t != "")
        self.assertEqual(body, "late 0 \u2713")
        consumption = await in_thread(browser.text_of, base + f"/#/message/Watched/{late[0].msg_id}",
                                      "#message-consumption", lambda t: "CG" in t)
        self.assertIn("CG NOT_ONLINE", consumption)
        await in_thread(browser.screenshot, "message")
        brokers = await in_thread(browser.text_of, base + "/#/", "#brokers-table", lambda t: "broker-a" in t)
        self.assertIn("ASYNC_MASTER", brokers)
        path = await in_thread(browser.screenshot, "overview")
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(await in_thread(browser.errors), [])

        writable = await self.dashboard(cluster.namesrv_addr, writes=True)  # --http-admin
        mode = await in_thread(browser.text_of, writable + "/#/topics", "#mode", lambda t: t != "")
        self.assertEqual(mode, "admin actions on")
        await in_thread(browser.text_of, None, "#topics-table", lambda t: "Watched" in t)  # the form is there too
        await in_thread(browser.submit, "#create-topic", topic="FromBrowser", read="2", write="2")
        created = await in_thread(browser.text_of, None, "#create-topic .result", lambda t: t != "")
        self.assertEqual(created, f"created on {cluster.brokers['broker-a'].config.advertised_address}")
        config = cluster.brokers["broker-a"].topics.select_topic_config("FromBrowser")
        assert config is not None
        self.assertEqual((config.read_queue_nums, config.write_queue_nums), (2, 2))
