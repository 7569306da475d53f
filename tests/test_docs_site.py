"""The documentation site: it builds with ``--strict``, anchors every message type and error code
of both protocols, links only to what exists, and works in a real browser (headless Chromium,
driven over the DevTools protocol).
"""

from __future__ import annotations

import base64
import functools
import http.server
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from codegen.ir import Protocol, TypeRef
from codegen.reference import anchor
from tests.conftest import ROOT

ARTIFACTS = ROOT / "test-artifacts"
BUILD_TIMEOUT_S = 180
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)

# --- the build -------------------------------------------------------------------------------


@dataclass
class Build:
    site: Path
    returncode: int
    log: str
    seconds: float
    _ids: dict[Path, set[str]] = field(default_factory=dict)

    def require(self) -> Path:
        assert self.returncode == 0, f"mkdocs build --strict failed:\n{self.log}"
        return self.site

    def html(self, page: str) -> str:
        return (self.require() / page).read_text(encoding="utf-8")

    def ids(self, path: Path) -> set[str]:
        if path not in self._ids:
            text = path.read_text(encoding="utf-8")
            self._ids[path] = set(re.findall(r'\sid="([^"]+)"', text))
        return self._ids[path]


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    site = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return Build(site, done.returncode, done.stdout + done.stderr, time.monotonic() - started)


def test_the_site_builds_with_strict(build: Build) -> None:
    site = build.require()
    for page in ("index.html", "reference/brisvox/index.html", "reference/ovp/index.html"):
        assert (site / page).is_file(), page
    assert (site / "search" / "search_index.json").is_file()


def test_the_api_reference_renders_the_runtime_docstrings(build: Build) -> None:
    api = build.html("api/index.html")
    for needle in ("ProtocolError", "ScaledClock", "SendText", "check_url", "decode_frame"):
        assert needle in api, needle
    assert "voxwire.brisvox.codec" in api and "voxwire.ovp.frames" in api


# --- anchors ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def protocol_list(protocols: dict[str, Protocol]) -> list[Protocol]:
    assert set(protocols) == {"brisvox", "ovp"}
    return list(protocols.values())


def _section(html: str, element_id: str) -> str:
    """The HTML from the heading with ``element_id`` to the next heading of any level <= 4."""
    start = re.search(rf'<h([1-6]) id="{re.escape(element_id)}"', html)
    assert start, f"no heading with id {element_id!r}"
    end = re.compile(r"<h[1-4][ >]").search(html, start.end())
    return html[start.start() : end.start() if end else len(html)]


def test_every_message_type_and_error_code_has_an_anchor(
    build: Build, protocol_list: list[Protocol]
) -> None:
    missing = []
    for p in protocol_list:
        page = build.require() / "reference" / p.id / "index.html"
        html = page.read_text(encoding="utf-8")
        ids = build.ids(page)
        for m in p.messages:
            if not re.search(rf'<h4 id="{re.escape(anchor(m.type))}"', html):
                missing.append(f"{p.id}: message {m.type} (#{anchor(m.type)})")
        for e in p.errors:
            if anchor("error", e.code) not in ids:
                missing.append(f"{p.id}: error {e.code} (#{anchor('error', e.code)})")
        for fr in p.frames:
            if anchor("frame", fr.name) not in ids:
                missing.append(f"{p.id}: frame {fr.name}")
    assert missing == []


def _named_types(ref: TypeRef) -> Iterator[str]:
    element = ref.element
    while element.item is not None:
        element = element.item
    if element.kind == "enum" and element.enum is not None:
        yield element.enum.name
    elif element.kind == "struct" and element.struct is not None:
        yield element.struct


def test_message_sections_link_to_the_types_they_reference(
    build: Build, protocol_list: list[Protocol]
) -> None:
    broken = []
    checked = 0
    for p in protocol_list:
        page = build.require() / "reference" / p.id / "index.html"
        html = page.read_text(encoding="utf-8")
        for m in p.messages:
            section = _section(html, anchor(m.type))
            for f in m.fields:
                for name in _named_types(f.type):
                    checked += 1
                    target = anchor(name)
                    if f'href="#{target}"' not in section or target not in build.ids(page):
                        broken.append(f"{p.id} {m.type}.{f.wire_name} -> #{target}")
    assert checked > 20
    assert broken == []


def test_the_frame_layout_shows_the_byte_diagram(build: Build) -> None:
    section = _section(build.html("reference/ovp/index.html"), "frame-audioframe")
    assert "<pre" in section and "total 652 bytes" in section
    assert "| version (u8) | flags (u8) | direction (u16) |" in section


# --- links -----------------------------------------------------------------------------------


def _links(build: Build) -> tuple[list[str], int]:
    """Every in-site link that does not resolve, as ``page -> href``; and how many were checked."""
    site = build.require()
    broken = []
    checked = 0
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue
        rel = page.relative_to(site).as_posix()
        text = page.read_text(encoding="utf-8")
        for href in re.findall(r'\shref="([^"]*)"', text):
            href = href.replace("&amp;", "&")
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
                continue
            checked += 1
            path, _, fragment = href.partition("#")
            path = path.partition("?")[0]
            target = (page.parent / urllib.parse.unquote(path)).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            resolves = target.is_file() and (
                not fragment or urllib.parse.unquote(fragment) in build.ids(target)
            )
            if not resolves:
                broken.append(f"{rel} -> {href}")
    return broken, checked


def test_every_link_of_the_site_resolves(build: Build) -> None:
    broken, checked = _links(build)
    assert checked > 1000
    assert broken == []


# --- the hand-written pages ------------------------------------------------------------------

TABBED_BLOCK = re.compile(r"^( +)```python\n(.*?)^\1```", re.S | re.M)


def _tabbed_examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for index, match in enumerate(TABBED_BLOCK.finditer(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(ROOT)}#tab{index}", textwrap.dedent(match[2])))
    return found


TABBED_EXAMPLES = _tabbed_examples()


@pytest.mark.parametrize(("name", "code"), TABBED_EXAMPLES, ids=[n for n, _ in TABBED_EXAMPLES])
def test_tabbed_example_runs(name: str, code: str) -> None:
    """Examples inside code tabs are indented, so tests/test_docs_examples.py does not see them."""
    exec(compile(code, name, "exec"), {"__name__": f"example:{name}"})


def test_the_home_page_has_an_example_per_protocol() -> None:
    names = [name for name, _ in TABBED_EXAMPLES if name.startswith("docs/index.md")]
    assert len(names) >= 2


def test_the_decode_failure_table_matches_the_specs(protocol_list: list[Protocol]) -> None:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    rows = {
        row[0].replace(" ", "_"): (row[2].strip("`"), row[3].strip("`"))
        for row in (
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == 5
        )
        if row[0] != "failure"
    }
    p = {proto.id: proto for proto in protocol_list}
    expected = {
        key: (p["brisvox"].decode_errors[key], p["ovp"].decode_errors[key])
        for key in p["brisvox"].decode_errors
    }
    assert rows == expected


# --- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, installed with apt-get where it is missing (CI runs as root)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and this machine has no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and apt-get needs root: apt-get install chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}"
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium, but it is not on PATH"
    return found


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def served(build: Build) -> Iterator[str]:
    """The built site over HTTP on loopback, on a free port."""
    handler = functools.partial(_QuietHandler, directory=str(build.require()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Page:
    """A minimal DevTools protocol client for one page target."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 15, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        request_id = self.next_id
        self.ws.send(json.dumps({"id": request_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == request_id:
                assert "error" not in message, f"{method}: {message['error']}"
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def pump(self, seconds: float) -> None:
        """Collect the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.events.append(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, f"{expression}: {result['exceptionDetails']}"
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            self.pump(0.1)
        raise AssertionError(f"still false after {timeout} s: {expression}")

    def open(self, url: str) -> list[str]:
        """Load ``url`` and return the console errors, exceptions and failed loads it caused."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        self._wait_for_load(url)
        return self.errors()

    def follow(self, click: str) -> list[str]:
        """Run ``click``, a script that follows a link to another page, and wait for that page."""
        self.events.clear()
        self.call("Runtime.evaluate", expression=click)
        self._wait_for_load(click)
        return self.errors()

    def _wait_for_load(self, what: str) -> None:
        deadline = time.monotonic() + 15
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, f"no page loaded after {what}"
            self.pump(0.1)
        self.pump(0.5)

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(
                    f"exception: {details.get('exception', {}).get('description', details['text'])}"
                )
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(
                    "console: " + " ".join(str(a.get("value", a)) for a in params.get("args", []))
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                found.append(f"log: {entry['text']} {entry.get('url', '')}")
        return found


@pytest.fixture(scope="module")
def page(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
                pytest.fail(f"chromium did not start its DevTools endpoint:\n{stderr[-3000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().splitlines()[0])
        ws_url = _page_target(port)
        # Never through a proxy of the environment (websockets >= 15 reads one by default), and
        # no keepalive: its pings come from a background thread through the global `random`,
        # which Hypothesis, drawing in later tests, reports as misuse.
        accepted = inspect.signature(connect).parameters
        options: dict[str, Any] = {"proxy": None, "ping_interval": None}
        options = {name: value for name, value in options.items() if name in accepted}
        with connect(
            ws_url, compression=None, max_size=64 * 2**20, open_timeout=10, **options
        ) as ws:
            p = Page(ws)
            for domain in ("Page", "Runtime", "Log"):
                p.call(f"{domain}.enable")
            yield p
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def _page_target(port: int) -> str:
    """The DevTools websocket URL of the browser's first page."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 15
    while True:
        try:
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                targets = json.load(response)
        except OSError:
            targets = []
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            url: str = pages[0]["webSocketDebuggerUrl"]
            return url
        assert time.monotonic() < deadline, f"no page target: {targets}"
        time.sleep(0.1)


def test_the_home_page_renders_in_chromium(page: Page, served: str) -> None:
    assert page.open(served) == []
    assert page.evaluate("document.querySelector('article h1').textContent").startswith("voxwire")
    # Material's JavaScript ran: the copy buttons of the code blocks exist.
    page.wait_for("document.querySelectorAll('button[data-md-type=copy]').length > 0")
    tabs = page.evaluate(
        "[...document.querySelectorAll('.md-tabs__link')].map(a => a.textContent.trim())"
    )
    assert {"Home", "Guides", "Reference"} <= set(tabs)
    # The code tabs switch: the OVP example shows once its label is clicked.
    labels = page.evaluate(
        "[...document.querySelectorAll('.tabbed-labels label')].map(l => l.textContent.trim())"
    )
    assert labels[:2] == ["Brisvox", "OVP"]
    visible = (
        "(() => {const b = document.querySelectorAll('.tabbed-block')[{}];"
        " return b.offsetParent !== null && b.getBoundingClientRect().height > 0})()"
    )
    assert page.evaluate(visible.replace("{}", "0")) and not page.evaluate(
        visible.replace("{}", "1")
    )
    page.evaluate("document.querySelectorAll('.tabbed-labels label')[1].click()")
    page.wait_for(visible.replace("{}", "1"))
    page.evaluate("document.querySelectorAll('.tabbed-labels label')[0].click()")
    page.wait_for(visible.replace("{}", "0"))
    page.evaluate("window.scrollTo(0, 0)")
    shot = page.call("Page.captureScreenshot", format="png")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "docs-home.png").write_bytes(base64.b64decode(shot["data"]))
    assert page.errors() == []


def test_a_message_page_renders_in_chromium(page: Page, served: str) -> None:
    assert page.open(served + "reference/brisvox/#session-start") == []
    heading = page.evaluate("document.getElementById('session-start').tagName")
    assert heading == "H4"
    # The field table links to the nested type, and the link leads to its heading.
    page.evaluate(
        "document.getElementById('session-start').parentElement"
        ".querySelector('a[href=\"#capabilities\"]').click()"
    )
    page.wait_for("location.hash === '#capabilities'")
    assert page.evaluate("document.getElementById('capabilities').tagName") == "H3"
    assert page.errors() == []


def test_the_frame_layout_renders_in_chromium(page: Page, served: str) -> None:
    assert page.open(served + "reference/ovp/#frame-audioframe") == []
    diagram = page.evaluate(
        "(() => { let e = document.getElementById('frame-audioframe');"
        " while (e && e.tagName !== 'PRE' && !e.querySelector('pre')) e = e.nextElementSibling;"
        " return e ? (e.tagName === 'PRE' ? e : e.querySelector('pre')).textContent : null })()"
    )
    assert diagram and "total 652 bytes" in diagram and "pcm (bytes 640)" in diagram
    # The diagram fits the content column of a 1280-pixel window: no sideways scrolling.
    overflow = page.evaluate(
        "(() => { const c = document.getElementById('frame-audioframe').parentElement"
        ".querySelector('h2[id^=frame-] ~ .highlight pre code');"
        " return c.scrollWidth - c.clientWidth })()"
    )
    assert overflow <= 0
    assert page.errors() == []


def test_search_finds_transcript_final(page: Page, served: str) -> None:
    assert page.open(served) == []
    page.evaluate("document.querySelector('input.md-search__input').focus()")
    for char in "transcript.final":
        page.call("Input.dispatchKeyEvent", type="keyDown", text=char, key=char)
        page.call("Input.dispatchKeyEvent", type="keyUp", key=char)
    # The search index loads in a web worker, and each keystroke is a query of its own: wait
    # for the results of the whole query, "transcript.final", highlighted in the result links.
    found = (
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => new URL(a.href))"
        ".some(u => u.pathname === '/reference/ovp/' && u.hash === '#transcript-final'"
        " && u.searchParams.get('h') === 'transcript.final')"
    )
    page.wait_for(found, timeout=15)
    # Following the result lands on the message's heading.
    errors = page.follow(
        "[...document.querySelectorAll('.md-search-result__item a')]"
        ".find(a => new URL(a.href).hash === '#transcript-final').click()"
    )
    assert errors == []
    assert page.evaluate("location.pathname + location.hash") == "/reference/ovp/#transcript-final"
    assert page.evaluate("document.getElementById('transcript-final').tagName") == "H4"
    assert page.errors() == []
