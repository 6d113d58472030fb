"""The documentation site works offline: built with `mkdocs build --strict`, served from 127.0.0.1, its pages load
nothing from another host (no web font, no CDN script), and search answers from the site's own index. Each page is
screenshotted under out/e2e/docs/."""
import functools
import os
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import SHOTS

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"home": "/", "architecture": "/architecture/", "lending": "/concepts/lending/",
         "placement": "/concepts/placement/", "rest-api": "/reference/rest-api/", "results": "/results/"}
REMOTE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.I)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                   check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return out


@pytest.fixture(scope="module")
def served(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def docs(browser, served):
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15000)
    own, external, errors = urlsplit(served).netloc, [], []

    def route(route_):
        if urlsplit(route_.request.url).netloc == own or route_.request.url.startswith(("data:", "blob:")):
            route_.continue_()
        else:
            external.append(route_.request.url)
            route_.abort()

    context.route("**/*", route)
    context.on("request", lambda r: None if urlsplit(r.url).netloc in (own, "") else external.append(r.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page, served
    context.close()
    assert not external, f"the docs tried to load from other hosts: {external}"
    assert not errors, f"JavaScript errors: {errors}"


def test_no_built_page_references_another_host_for_an_asset(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) > 40
    remote = {str(p.relative_to(site)): REMOTE.findall(p.read_text()) for p in pages}
    assert not {page: tags for page, tags in remote.items() if tags}
    assert "fonts.googleapis.com" not in "".join(p.read_text() for p in pages)


def test_pages_render_offline_and_are_screenshotted(docs):
    page, base = docs
    shots = SHOTS / "docs"
    shots.mkdir(parents=True, exist_ok=True)
    for n, (name, path) in enumerate(PAGES.items(), 1):
        response = page.goto(base + path)
        page.wait_for_load_state("networkidle")
        assert response.ok, path
        assert page.locator("article h1").count() == 1, path
        page.screenshot(path=str(shots / f"{n:02d}-{name}.png"), full_page=name not in {"rest-api"})
    # generated at build time: the REST API from the OpenAPI schema
    page.goto(base + "/reference/rest-api/")
    assert page.get_by_role("heading", name="GET /api/jobs/").count() >= 1


def test_search_answers_offline(docs):
    page, base = docs
    page.goto(base + "/")
    page.wait_for_load_state("networkidle")
    page.locator("input.md-search__input").click()  # the header's search box (a 1366 px wide window shows it)
    page.keyboard.type("graceful take-backs", delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(state="visible")
    assert results.count() > 0
    assert "take" in results.first.inner_text().lower()
    page.screenshot(path=str(SHOTS / "docs" / "search.png"))
