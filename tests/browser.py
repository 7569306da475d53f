"""The shared headless-Chromium helper: Debian's chromium driven by Playwright (no browser
download: ``executable_path`` is the system's chromium)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.servers import debian_program

__all__ = ["chromium", "chromium_page", "serve_folder"]

FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run")


def chromium() -> str:
    """Debian's chromium, installed with apt-get where it is missing (CI runs as root)."""
    return debian_program("chromium", "chromium")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        ".js": "text/javascript",
        ".html": "text/html",
        "": "application/octet-stream",
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve ``folder`` over HTTP on 127.0.0.1; yields the base URL."""

    def handler(*args: Any) -> _QuietHandler:
        return _QuietHandler(*args, directory=str(folder))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.asynccontextmanager
async def chromium_page(*flags: str) -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium (Playwright's async API), launched with ``flags``
    besides the usual ones; its console errors fail nothing by themselves, they are kept in
    ``page.console_lines``."""
    executable = chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=executable, headless=True, args=[*FLAGS, *flags]
        )
        try:
            page = await browser.new_page()
            lines: list[str] = []
            page.on("console", lambda message: lines.append(f"{message.type}: {message.text}"))
            page.on("pageerror", lambda error: lines.append(f"pageerror: {error}"))
            page.console_lines = lines
            yield page
        finally:
            await browser.close()
