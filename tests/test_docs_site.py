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

from codegen.flows import load_flows
from codegen.ir import Protocol, TypeRef
from codegen.pipeline import load_protocols
from codegen.reference import anchor
from tests.conftest import ROOT
from tests.servers import debian_program

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


def test_the_frame_layout_is_a_picture_of_its_fields(
    build: Build, protocol_list: list[Protocol]
) -> None:
    for p in protocol_list:
        for fr in p.frames:
            section = _section(build.html(f"reference/{p.id}/index.html"), anchor("frame", fr.name))
            svg = re.search(r"<svg .*?</svg>", section, re.S)
            assert svg, f"{p.id}: no picture of frame {fr.name}"
            texts = re.findall(r'class="(field|offset|flag)">([^<]*)<', svg[0])
            assert [t for c, t in texts if c == "field"] == [f.name for f in fr.fields]
            offsets = [int(t) for c, t in texts if c == "offset"]
            assert offsets == [f.offset for f in fr.fields] + [fr.size]
            flags = "".join(t for c, t in texts if c == "flag")
            for f in fr.fields:
                for _, name, _ in f.flags:
                    assert name in flags


def test_the_senders_are_a_list(build: Build, protocol_list: list[Protocol]) -> None:
    for p in protocol_list:
        html = build.html(f"reference/{p.id}/index.html")
        found = re.search(r"<strong>Senders\.</strong></p>\s*<ul>(.*?)</ul>", html, re.S)
        assert found, f"{p.id}: the senders are not a list"
        items = re.findall(r"<li>(.*?)</li>", found[1], re.S)
        assert [re.search(r"<code>([^<]*)</code>", i)[1] for i in items] == [  # type: ignore[index]
            s.id for s in p.senders
        ]
        assert " - `" not in html


def test_each_sender_has_a_page_of_what_it_sends(
    build: Build, protocol_list: list[Protocol]
) -> None:
    for p in protocol_list:
        for sender in p.senders:
            html = build.html(f"reference/{p.id}-from-{sender.id}/index.html")
            linked = re.findall(rf'href="\.\./{p.id}/#([^"]+)"', html)
            assert linked == [anchor(m.type) for m in sender.messages], sender.id


def test_every_message_heading_says_its_direction(
    build: Build, protocol_list: list[Protocol]
) -> None:
    for p in protocol_list:
        html = build.html(f"reference/{p.id}/index.html")
        for m in p.messages:
            heading = re.search(rf'<h4 id="{re.escape(anchor(m.type))}">(.*?)</h4>', html, re.S)
            assert heading, m.type
            text = re.sub(r"<[^>]+>", "", heading[1])
            receivers = [s.id for s in p.senders if s.id not in m.senders]
            expected = (
                f"{' and '.join(m.senders)} → {' and '.join(receivers)}"
                if receivers
                else "both ways"
            )
            assert f"{m.type} · {expected}" in text, (m.type, text)


def test_the_asyncapi_pages_show_every_message_of_each_side(
    build: Build, protocol_list: list[Protocol]
) -> None:
    for p in protocol_list:
        html = build.html(f"reference/{p.id}-asyncapi/index.html")
        linked = set(re.findall(rf'href="\.\./{p.id}/#([^"]+)"', html))
        assert {anchor(m.type) for m in p.messages} <= linked
        assert {anchor("frame", fr.name) for fr in p.frames} <= linked
        assert "asyncapi: 3.0.0" in re.sub(r"<[^>]+>", "", html)  # the whole document, folded


def test_shared_fields_are_shown_once(build: Build, protocol_list: list[Protocol]) -> None:
    for p in protocol_list:
        html = build.html(f"reference/{p.id}/index.html")
        for fs in p.field_sets:
            assert anchor("fields", fs.name) in build.ids(
                build.require() / "reference" / p.id / "index.html"
            )
            for f in fs.fields:
                # One row in the field set's table, none in the messages that carry it: the
                # page has exactly one more row of this name than the types and messages
                # whose own fields have it.
                others = sum(
                    g.wire_name == f.wire_name
                    for fields in [
                        *(m.own_fields for m in p.messages),
                        *(t.fields for t in p.structs),
                        *(other.fields for other in p.field_sets if other is not fs),
                    ]
                    for g in fields
                )
                rows = re.findall(rf"<tr>\s*<td><code>{re.escape(f.wire_name)}</code>", html)
                assert len(rows) == 1 + others, (p.id, fs.name, f.wire_name, len(rows), others)


def test_the_decision_indexes_summarise_each_decision(
    build: Build, protocol_list: list[Protocol]
) -> None:
    for p in protocol_list:
        html = build.html(f"reference/{p.id}-decisions/index.html")
        table = html[: html.index("</table>")]
        rows = re.findall(
            r"<tr>\s*<td><a [^>]*>([^<]+)</a></td>\s*<td>[^<]*</td>\s*<td>(.*?)</td>", table, re.S
        )
        assert [r[0] for r in rows] == [d.id for d in p.decisions]
        assert all(len(re.sub(r"<[^>]+>", "", summary).strip()) > 20 for _, summary in rows)


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
    return debian_program("chromium", "chromium")


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
    size = page.evaluate(
        "(() => { const r = document.querySelector('#frame-audioframe-diagram svg')"
        ".getBoundingClientRect(); return [r.width, r.height] })()"
    )
    assert size[0] > 400 and size[1] > 100
    # The picture fits the content column of a 1280-pixel window: no sideways scrolling.
    overflow = page.evaluate(
        "(() => { const d = document.getElementById('frame-audioframe-diagram');"
        " return d.scrollWidth - d.clientWidth })()"
    )
    assert overflow <= 0
    _shoot(page, "#frame-audioframe-diagram svg", "diagram-ovp-frame-audioframe.png")
    assert page.errors() == []


def _shoot(page: Page, selector: str, name: str) -> None:
    """Screenshot the element ``selector``, keep it in test-artifacts/, assert it is not blank."""
    page.evaluate(f"document.querySelector({json.dumps(selector)}).scrollIntoView()")
    # The theme's fixed header would cover the top of the picture.
    page.evaluate(
        "document.querySelectorAll('.md-header, .md-tabs')"
        ".forEach(e => e.style.visibility = 'hidden')"
    )
    box = page.evaluate(
        f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
        ".getBoundingClientRect();"
        " return {x: r.x + window.scrollX, y: r.y + window.scrollY, width: r.width,"
        " height: r.height} })()"
    )
    shot = page.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=False,
        clip={**box, "scale": 1},
    )
    data = base64.b64decode(shot["data"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / name).write_bytes(data)
    assert _inked_fraction(data) > 0.01, f"{name}: the screenshot is blank"


def _inked_fraction(png: bytes) -> float:
    """The fraction of a PNG's pixels that differ from its top-left pixel (0 for a blank one)."""
    import struct
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (
                    line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)
                ) & 0xFF
        rows.append(line)
        previous = line
    first = bytes(rows[0][:channels])
    inked = sum(
        1 for line in rows for x in range(0, stride, channels) if line[x : x + channels] != first
    )
    return inked / max(1, width * height)


@pytest.mark.parametrize("protocol_id", ["brisvox", "ovp"])
def test_every_diagram_renders_in_chromium(
    page: Page, served: str, protocol_id: str, protocols: dict[str, Protocol]
) -> None:
    flows = load_flows(protocols[protocol_id], ROOT)
    assert flows is not None and flows.flows
    assert page.open(served + f"reference/{protocol_id}-diagrams/") == []
    for flow in flows.flows:
        selector = f"#{anchor('flow', flow.id)}-diagram svg"
        drawn = page.evaluate(
            f"(() => {{ const s = document.querySelector({json.dumps(selector)});"
            " if (!s) return null; const r = s.getBoundingClientRect();"
            " return {width: r.width, height: r.height,"
            " participants: [...s.querySelectorAll('.participant')].map(t => t.textContent),"
            " steps: s.querySelectorAll('.step').length} })()"
        )
        assert drawn, f"{protocol_id}: no diagram of flow {flow.id}"
        assert drawn["width"] > 200 and drawn["height"] > 100, (flow.id, drawn)
        assert drawn["participants"] == [label for _, label in flow.participants]
        assert drawn["steps"] >= len(flow.steps)
        _shoot(page, selector, f"diagram-{protocol_id}-{flow.id}.png")
    assert page.errors() == []


STATE_MACHINES = [
    ("brisvox-link/", "brisvox", "agent"),
    ("brisvox-link/", "brisvox", "engine"),
    ("ovp-sessions/", "ovp", "client"),
    ("ovp-sessions/", "ovp", "gateway"),
]


def test_every_session_machine_of_the_spec_is_drawn_on_a_page() -> None:
    listed = {(protocol, role) for _, protocol, role in STATE_MACHINES}
    assert listed == {(p.id, m.role) for p in load_protocols() for m in p.machines}


@pytest.mark.parametrize(("path", "protocol", "role"), STATE_MACHINES)
def test_each_state_machine_renders_from_the_spec(
    page: Page, served: str, path: str, protocol: str, role: str
) -> None:
    machine = next(
        m for p in load_protocols() if p.id == protocol for m in p.machines if m.role == role
    )
    assert page.open(served + path) == []
    selector = f"#state-{protocol}-{role} svg"
    drawn = page.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector + ' .state')})].map(t => t.textContent)"
    )
    assert drawn == [s.id for s in machine.states]
    numbers = page.evaluate(f"document.querySelectorAll({json.dumps(selector + ' .edge')}).length")
    assert numbers >= len({(t.source, t.target) for t in machine.transitions})
    rows = page.evaluate(
        f"[...document.querySelector({json.dumps(f'#state-{protocol}-{role}')})"
        ".nextElementSibling.querySelectorAll('tbody tr')].length"
    )
    assert rows == len(machine.transitions)
    _shoot(page, selector, f"diagram-state-{protocol}-{role}.png")
    assert page.errors() == []


@pytest.fixture
def wide(page: Page) -> Iterator[Page]:
    """The page at 1400 pixels wide, the width at which the reference used to break words."""
    page.call(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    try:
        yield page
    finally:
        page.call("Emulation.clearDeviceMetricsOverride")


_BROKEN_WORDS = """(() => {
  const broken = [];
  const lines = (node, start, end) => {
    const range = document.createRange();
    range.setStart(node, start); range.setEnd(node, end);
    return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size;
  };
  for (const cell of document.querySelectorAll('article td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[A-Za-z0-9_.:$]+/g)) {
        if (m[0].length > 1 && lines(node, m.index, m.index + m[0].length) > 1) broken.push(m[0]);
      }
    }
  }
  for (const code of document.querySelectorAll('article td code')) {
    const rects = new Set([...code.getClientRects()].map(r => Math.round(r.top)));
    if (rects.size > 1) broken.push(code.textContent);
  }
  return broken;
})()"""


@pytest.mark.parametrize(
    "path",
    [
        "reference/brisvox/",
        "reference/ovp/",
        "reference/brisvox-decisions/",
        "reference/ovp-decisions/",
    ],
)
def test_no_reference_table_cell_breaks_an_identifier(wide: Page, served: str, path: str) -> None:
    assert wide.open(served + path) == []
    assert wide.evaluate(_BROKEN_WORDS) == []


@pytest.mark.parametrize("protocol_id", ["brisvox", "ovp"])
def test_the_senders_render_as_a_list_in_chromium(
    page: Page, served: str, protocol_id: str, protocols: dict[str, Protocol]
) -> None:
    assert page.open(served + f"reference/{protocol_id}/") == []
    items = page.evaluate(
        "(() => { const p = [...document.querySelectorAll('article p')]"
        ".find(e => e.textContent.trim() === 'Senders.');"
        " const list = p && p.nextElementSibling;"
        " return list && list.tagName === 'UL'"
        " ? [...list.children].map(li => li.querySelector('code').textContent) : null })()"
    )
    assert items == [s.id for s in protocols[protocol_id].senders]


def test_the_ovp_reference_page_is_under_a_third_of_its_old_height(wide: Page, served: str) -> None:
    assert wide.open(served + "reference/ovp/") == []
    # 120,000 pixels at 1400 wide before the envelope was shown once (issue 17).
    height = wide.evaluate("document.documentElement.scrollHeight")
    assert height < 40_000, height


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
