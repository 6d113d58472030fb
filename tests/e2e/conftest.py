"""Browser tests: Playwright drives Debian's Chromium (never a downloaded browser) against pytest-django's live
server. Every request to another host is blocked and fails the test; every page visited is screenshotted
under out/e2e/<test>/."""
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("TIDAL_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parents[2] / "out" / "e2e"

# Playwright's sync API runs an event loop in this thread; the tests' ORM calls are synchronous all the same.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `bash platform/install.sh` installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


class Console:
    """One signed-out browser tab on the live server, with screenshots and the requests it tried elsewhere."""

    def __init__(self, page, base: str, shots: Path) -> None:
        self.page, self.base, self.shots, self.external, self.errors = page, base, shots, [], []
        self._n = 0

    def open(self, path: str):
        response = self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        return response

    def follow(self, link: str) -> None:
        """Click a link and wait until its page has loaded its scripts: htmx binds its triggers on load, and a change
        made before that is lost (a slow CI machine filled a form faster than htmx started)."""
        self.page.get_by_role("link", name=link).first.click()
        self.page.wait_for_load_state("networkidle")

    def shot(self, name: str) -> Path:
        self._n += 1
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{self._n:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def sign_in(self, username: str, password: str = "pw") -> None:
        self.open("/login/")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_load_state("networkidle")


@pytest.fixture
def console(browser, live_server, request):
    context = browser.new_context(viewport={"width": 1366, "height": 900}, timezone_id="Europe/Berlin")
    page = context.new_page()
    page.set_default_timeout(15000)
    base = live_server.url
    shots = SHOTS / re.sub(r"[^\w.-]+", "_", request.node.name)
    tab = Console(page, base, shots)
    own_host = urlsplit(base).netloc

    def route(route_):
        if urlsplit(route_.request.url).netloc == own_host or route_.request.url.startswith(("data:", "blob:")):
            route_.continue_()
        else:
            tab.external.append(route_.request.url)
            route_.abort()

    context.route("**/*", route)
    page.on("pageerror", lambda error: tab.errors.append(str(error)))
    yield tab
    context.close()
    assert not tab.external, f"pages tried to load from other hosts: {tab.external}"
    assert not tab.errors, f"JavaScript errors: {tab.errors}"
