"""The browser harness (`tests/fixtures/browser.py`) on small pages served from a stdlib HTTP server:
it catches console errors and exceptions, writes full-page PNGs, finds accessibility violations with
axe-core (also under a strict Content-Security-Policy) and reports the keyboard's focus order."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.fixtures.browser import (
    IMPACTS,
    BrowserSession,
    BrowserSetupError,
    FocusedElement,
    PageError,
    axe_violations,
    chromium_path,
    screenshot_dir,
    tab_order,
)

pytestmark = pytest.mark.timeout(30)

HEAD = '<meta charset="utf-8"><link rel="icon" href="data:,"><title>{title}</title>'
"""Every page has a language, a title and an inline icon (so Chromium asks for no /favicon.ico)."""


def html(title: str, body: str) -> bytes:
    return f'<!doctype html><html lang="en"><head>{HEAD.format(title=title)}</head><body>{body}</body></html>'.encode()


PAGES: dict[str, bytes] = {
    "/clean": html("Clean", "<main><h1>Nothing wrong here</h1></main>"),
    "/broken": html(
        "Broken",
        "<main><h1>Broken</h1></main>"
        "<script>console.error('ledger fetch failed'); throw new Error('explorer crashed');</script>",
    ),
    "/tall": html("Tall", '<main><h1>Tall</h1><div style="height: 2400px">long table</div></main>'),
    "/inaccessible": html(
        "Inaccessible",
        '<main><h1>Slashes</h1><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" width="40" height="40">'
        '<p style="color: #dddddd; background: #ffffff">barely readable</p></main>',
    ),
    "/accessible": html(
        "Accessible",
        '<main><h1>Slashes</h1><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="slash chart"'
        ' width="40" height="40"><p style="color: #222222; background: #ffffff">easy to read</p></main>',
    ),
    "/links": html(
        "Links",
        '<header><a href="/market">Market</a></header><main><h1>Pool 1</h1><p>text, not focusable</p>'
        '<a href="/pool/1">Pool <b>1</b></a> <a href="/provider/0xab">Provider 0xab</a></main>',
    ),
}
STRICT_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"
"""Sent with /accessible: no inline or injected script may run there (styles may), yet axe must."""


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if self.path == "/accessible":
            self.send_header("Content-Security-Policy", STRICT_CSP)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Requests are the test's business, not the terminal's."""


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """`PAGES` on a free loopback port, for this module's tests."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, name="browser-test-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_console_error_and_uncaught_exception_are_recorded(page: Page, page_errors: list[PageError], site: str):
    page.goto(f"{site}/broken")
    page.wait_for_function("() => document.readyState === 'complete'")

    assert [(e.kind, e.text) for e in page_errors if e.kind == "console"] == [("console", "ledger fetch failed")]
    assert page_errors[0].location.startswith(f"{site}/broken:")
    (exception,) = [e for e in page_errors if e.kind == "pageerror"]
    assert "explorer crashed" in exception.text


def test_clean_page_records_no_errors(page: Page, page_errors: list[PageError], site: str):
    page.goto(f"{site}/clean")

    assert page.title() == "Clean"
    assert page_errors == []


def test_screenshot_is_a_full_page_png(
    page: Page, screenshot: Callable[[Page, str], Path], site: str, tmp_path: Path, request: pytest.FixtureRequest
):
    page.goto(f"{site}/tall")

    path = screenshot(page, "tall")

    assert path == screenshot_dir(request.node.nodeid, tmp_path / "screenshots") / "tall.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    assert width == page.viewport_size["width"]
    assert height > 2400 > page.viewport_size["height"]  # the whole page, not the viewport
    with pytest.raises(ValueError, match="letters, digits"):
        screenshot(page, "../escape")


def test_missing_image_alt_and_low_contrast_are_violations(page: Page, site: str):
    page.goto(f"{site}/inaccessible")

    violations = {v.id: v for v in axe_violations(page)}

    assert set(violations) == {"image-alt", "color-contrast"}
    assert violations["image-alt"].impact == "critical"
    assert violations["image-alt"].targets == ("img",)
    assert violations["color-contrast"].impact == "serious"
    assert violations["color-contrast"].targets == ("p",)
    assert [v.id for v in axe_violations(page, impact=("critical",))] == ["image-alt"]
    with pytest.raises(ValueError, match="impact"):
        axe_violations(page, impact=("severe",))


def test_accessible_page_under_strict_csp_has_no_violations(page: Page, page_errors: list[PageError], site: str):
    response = page.goto(f"{site}/accessible")
    assert response is not None and response.headers["content-security-policy"] == STRICT_CSP

    assert axe_violations(page, impact=IMPACTS) == []
    assert page_errors == []  # injecting axe broke no CSP rule


def test_tab_reaches_the_links_in_document_order(page: Page, site: str):
    page.goto(f"{site}/links")

    assert tab_order(page, 3) == [
        FocusedElement("a", "Market", "/market"),
        FocusedElement("a", "Pool 1", "/pool/1"),
        FocusedElement("a", "Provider 0xab", "/provider/0xab"),
    ]
    with pytest.raises(ValueError, match="n >= 1"):
        tab_order(page, 0)


def test_missing_chromium_names_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROOFPOOL_CHROMIUM", str(tmp_path / "no-chromium"))

    with pytest.raises(BrowserSetupError, match=r"make setup.*PROOFPOOL_CHROMIUM"):
        chromium_path()


def test_a_stopped_session_gives_the_event_loop_back():
    """Why the shared browser stops when the next test does not use it: while it runs, asyncio.run
    fails in the main thread (tests that drive an ASGI app with it would break)."""
    session = BrowserSession()
    assert session.browser().is_connected()
    idle = asyncio.sleep(0)
    try:
        with pytest.raises(RuntimeError, match="running event loop"):
            asyncio.run(idle)
    finally:
        idle.close()
        session.stop()

    assert asyncio.run(asyncio.sleep(0, result="free")) == "free"


def test_screenshot_dir_is_per_test_under_the_environment_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PROOFPOOL_SCREENSHOT_DIR", raising=False)
    assert screenshot_dir("tests/x.py::test_a", tmp_path) == tmp_path

    monkeypatch.setenv("PROOFPOOL_SCREENSHOT_DIR", str(tmp_path / "ci"))
    assert screenshot_dir("tests/x.py::test_a[1]", tmp_path) == tmp_path / "ci" / "tests_x.py_test_a_1"
