"""``voxwire report``: one self-contained HTML page per capture, its figures the library's.

The page is judged by its structure (sections, tables, the SVG elements by class), pinned for a
scripted capture, and in headless Chromium: no console error, no request but the page, and every
picture drawn with the elements the statistics call for. Long captures stay bounded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from codegen.ir import Protocol
from tests.browser import chromium_page, serve_folder
from voxwire import brisvox, ovp, report
from voxwire.capture import CaptureError, Frame, LinkEvent, read_capture
from voxwire.observe.snapshot import LATENCY_BOUNDS_MS, Snapshot
from voxwire.observe.stats import MAX_POINTS, SessionStats
from voxwire.report import MAX_ROWS, read_call
from voxwire.report.page import render_page

EPOCH = datetime(2026, 5, 14, 12, 0, tzinfo=UTC)
SESSION = "ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0"


def voxwire(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxwire", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Script:
    """A capture written line by line at explicit times, its messages from the spec's examples."""

    def __init__(self, protocols: dict[str, Protocol], recorded_by: str = "client") -> None:
        self.examples = {m.type: m.examples[0].json for m in protocols["ovp"].messages}
        header = {"capture": "voxwire", "version": 2, "protocol": "ovp", "recorded_by": recorded_by}
        self.lines = [json.dumps(header)]

    def message(self, t: float, sender: str, kind: str, seq: int, ts: float, **fields: Any) -> None:
        stamp = (EPOCH + timedelta(seconds=ts)).isoformat(timespec="milliseconds")
        data = {**self.examples[kind], "seq": seq, "ts": stamp.replace("+00:00", "Z")}
        data.update(session_id=SESSION, **fields)
        self.lines.append(json.dumps({"t": t, "from": sender, "text": json.dumps(data)}))

    def frame(self, t: float, sender: str, seq: int, clock: int, flags: int = 0) -> None:
        direction = ovp.FrameDirection.CLIENT_TO_SERVER
        if sender == "server":
            direction = ovp.FrameDirection.SERVER_TO_CLIENT
        data = ovp.encode_frame(
            ovp.AudioFrame(
                flags=flags, direction=direction, frame_seq=seq, rtp_timestamp=clock, pcm=bytes(640)
            )
        )
        self.lines.append(
            json.dumps({"t": t, "from": sender, "binary": base64.b64encode(data).decode()})
        )

    def link(self, t: float, event: str) -> None:
        self.lines.append(json.dumps({"t": t, "link": event}))

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        return path


def scripted(protocols: dict[str, Protocol], path: Path) -> Path:
    """A call with a gap, a late frame, two turns (one answered after 250 ms), a tool call, a
    resume with one event replayed, and one violation (a client seq that goes back)."""
    s = Script(protocols)
    s.message(0.01, "server", "session.start", 0, 0.01)
    for i in range(10):
        if i != 4:  # frame 4 is lost; frame 6 is 8 ms late
            s.frame(0.1 + i * 0.02 + (0.008 if i == 6 else 0), "client", i, 320 * i, int(i == 0))
    for i in range(5):
        s.frame(0.35 + i * 0.02, "server", i, 320 * i)
    s.message(0.3, "server", "transcript.final", 1, 0.3, speaker="caller")
    s.message(0.55, "server", "agent.thinking", 2, 0.55)
    s.message(0.6, "server", "agent.tool.invoke", 3, 0.6, tool_call_id="tc_1")
    s.message(0.9, "server", "agent.tool.result", 4, 0.9, tool_call_id="tc_1", duration_ms=300)
    s.message(1.0, "server", "agent.output", 5, 1.0)
    s.link(1.2, "lost")
    s.link(2.0, "open")
    s.message(2.0, "client", "session.resume", 1, 2.0, last_server_seq=5)
    s.message(2.05, "server", "agent.thinking", 6, 1.5)
    s.message(2.1, "server", "transcript.final", 7, 2.1, speaker="caller")
    s.message(2.2, "client", "agent.input", 1, 2.2)
    s.message(3.0, "server", "session.end", 8, 3.0)
    return s.write(path)


@pytest.fixture
def capture(protocols: dict[str, Protocol], tmp_path: Path) -> Path:
    return scripted(protocols, tmp_path / "call.jsonl")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``voxwire demo --record DIR``, run once: DIR."""
    folder = tmp_path_factory.mktemp("demo")
    done = voxwire("demo", "--record", str(folder))
    assert done.returncode == 0, done.stderr
    return folder


def replayed(path: Path) -> Snapshot:
    """The capture replayed into SessionStats by hand: what read_call must give."""
    modules = {"brisvox": brisvox, "ovp": ovp}
    with path.open("rb") as lines:
        header, items = read_capture(lines)
        stats, module = SessionStats.of(header.protocol), modules[header.protocol]
        for item in items:
            if isinstance(item, CaptureError):
                continue
            if isinstance(item, LinkEvent):
                stats.on_link(item.event, item.t)
            elif isinstance(item.data, str):
                size = len(item.data.encode())
                stats.on_message(
                    item.sender, module.decode(item.data, item.sender), item.t, size=size
                )
            else:
                assert isinstance(item, Frame)
                stats.on_frame(item.sender, ovp.decode_frame(item.data), item.t)
    return stats.snapshot()


class Structure(HTMLParser):
    """What a page is made of: its sections, its tables' rows, each SVG's elements by class."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.rows: Counter[str] = Counter()
        self.svg: dict[str, Counter[str]] = {}
        self.external: list[str] = []
        self.tags: Counter[str] = Counter()
        self._section = ""
        self._svg: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags[tag] += 1
        for key in ("src", "href"):
            if found.get(key) and not str(found[key]).startswith(("#", "data:")):
                self.external.append(str(found[key]))
        if tag == "section":
            self._section = str(found["id"])
            self.sections.append(self._section)
        elif tag == "tr":
            self.rows[self._section] += 1
        elif tag == "svg":
            self._svg = str(found["id"])
            self.svg[self._svg] = Counter()
        elif self._svg is not None:
            self.svg[self._svg][f"{tag}.{found.get('class') or ''}"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None


def structure(page: str) -> Structure:
    parsed = Structure()
    parsed.feed(page)
    return parsed


def test_the_report_reads_what_the_statistics_read(capture: Path) -> None:
    call = read_call(capture)
    assert call.snapshot == replayed(capture)
    s = call.snapshot
    client = s.directions["client"]
    assert (client.frames, client.frame_gaps, client.frames_missing, client.silent_frames) == (
        9,
        1,
        1,
        1,
    )
    assert [(t.ended_at, t.latency) for t in s.turn_list] == [(0.3, 0.25), (2.1, None)]
    assert [(c.key, c.outcome, c.duration, c.stated_ms) for c in s.tool_list] == [
        ("tc_1", "ok", 0.3, 300)
    ]
    assert [(r.lost_at, r.duration, r.replayed) for r in s.resume_list] == [(1.2, 0.8, 1)]
    assert (call.messages, call.frames, call.link_events, call.violations, call.notes) == (
        11,
        14,
        2,
        1,
        1,
    )
    assert [(v.line, v.t, v.code, v.text) for v in call.verdicts] == [
        (7, 0.2, "note", "frame_seq 5 after 3: 1 frame lost"),
        (27, 2.2, "OVP_SEQ_REGRESSION", "seq 1 is not greater than 1"),
    ]
    assert call.complete and len(call.rows) == 13


def test_the_page_has_a_pinned_structure(capture: Path) -> None:
    page = render_page(read_call(capture))
    found = structure(page)
    assert found.sections == [
        "timeline",
        "statistics",
        "latency",
        "audio",
        "turns",
        "tools",
        "resumes",
        "verdicts",
        "messages",
    ]
    assert dict(found.rows) == {
        "statistics": 1 + 12 + 1 + 9,
        "turns": 3,
        "tools": 2,
        "resumes": 2,
        "verdicts": 3,
        "messages": 14,
    }
    assert dict(found.svg["timeline-svg"]) == {
        "rect.resume": 1,
        "line.link": 2,  # lost, open
        "line.msg": 11,
        "a.": 11 + 1,  # each message, and the violation, links to its line (frames are unlisted)
        "rect.audio": 14,  # one 20 ms bucket a frame
        "rect.gap": 1,
        "rect.turn": 1,
        "rect.turn unanswered": 1,
        "rect.tool tool-ok": 1,
        "rect.note": 1,
        "rect.violation": 1,
        "title.": 1 + 2 + 11 + 14 + 1 + 2 + 1 + 2,  # every mark says what it is
        "text.": 7 + 7,  # the lanes' labels, the axis's (0 s to 3 s)
        "line.axis": 1 + 7,
    }
    latency = found.svg["latency-svg"]
    assert latency["rect.bar"] == len(LATENCY_BOUNDS_MS) + 1
    jitter = found.svg["jitter-svg"]
    # The client's frames, in two runs around the missing one; the server's in one.
    assert (jitter["polyline.jitter jitter-0"], jitter["polyline.jitter jitter-1"]) == (1, 2)
    assert jitter["rect.gap"] == 1
    assert found.tags["script"] == 0 and found.tags["img"] == 0 and found.tags["link"] == 1
    assert found.external == []
    assert page.count("http") == page.count('xmlns="http://www.w3.org/2000/svg"')


def test_the_same_capture_gives_the_same_page(capture: Path) -> None:
    assert render_page(read_call(capture)) == render_page(read_call(capture))


def test_the_command_writes_the_page_beside_the_capture(capture: Path) -> None:
    done = voxwire("report", str(capture))
    assert done.returncode == 0, done.stderr
    page = capture.with_suffix(".html")
    assert done.stdout == (
        f"{page}: the report of {capture} (11 messages, 14 frames, 1 violation)\n"
    )
    assert page.read_text(encoding="utf-8") == render_page(read_call(capture))
    other = capture.parent / "out" / "x.html"
    other.parent.mkdir()
    done = voxwire("report", str(capture), "-o", str(other), "--protocol", "ovp")
    assert done.returncode == 0 and other.is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file or directory"),
        (b"", ":1: empty file: no capture header"),
        (b'{"capture": "pcap"}\n', ":1: not a voxwire capture"),
        (b'{"capture": "voxwire", "version": 9}\n', ":1: capture version 9"),
    ],
)
def test_what_is_no_capture_gets_one_line_and_status_2(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "capture.jsonl"
    if content is not None:
        path.write_bytes(content)
    done = voxwire("report", str(path))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"voxwire report: {path}") and done.stderr.count("\n") == 1
    assert message in done.stderr
    assert not path.with_suffix(".html").exists()


def test_the_report_never_overwrites_its_capture_or_writes_nowhere(capture: Path) -> None:
    done = voxwire("report", str(capture), "-o", str(capture))
    assert done.returncode == 2 and "would overwrite the capture" in done.stderr
    done = voxwire("report", str(capture), "-o", str(capture.parent / "no" / "such" / "x.html"))
    assert done.returncode == 2 and "No such file or directory" in done.stderr


@pytest.mark.parametrize("extra", [0, 1])
def test_rows_and_verdicts_are_listed_up_to_their_bound(
    capture: Path, monkeypatch: pytest.MonkeyPatch, extra: int
) -> None:
    monkeypatch.setattr(report, "MAX_ROWS", 13 - extra)  # the scripted call has 13 rows
    monkeypatch.setattr(report, "MAX_VERDICTS", 2 - extra)  # and 2 findings
    call = read_call(capture)
    assert (len(call.rows), call.row_count, call.complete) == (13 - extra, 13, not extra)
    assert (len(call.verdicts), call.violations + call.notes) == (2 - extra, 2)
    page = render_page(call)
    found = structure(page)
    assert found.rows["messages"] == 1 + 13 - extra
    assert ("The first 12 of 13 messages" in page) is bool(extra)
    # Not every message listed: the timeline draws their density from the series instead.
    assert (found.svg["timeline-svg"]["line.msg"] == 0) is bool(extra)


def test_a_long_capture_gives_a_bounded_page(
    protocols: dict[str, Protocol], tmp_path: Path
) -> None:
    """An hour of events (3,000 messages) and two minutes of audio: the page lists MAX_ROWS
    messages and draws at most MAX_POINTS buckets a direction."""
    s = Script(protocols)
    s.message(0.0, "server", "session.start", 0, 0.0)
    for i in range(6000):
        s.frame(1.0 + i * 0.02, "client", i, 320 * i)
    for i in range(1, 3001):
        s.message(i * 1.2, "server", "agent.thinking", i, i * 1.2)
    path = s.write(tmp_path / "long.jsonl")
    started = time.monotonic()
    done = voxwire("report", str(path), timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    page = path.with_suffix(".html").read_text(encoding="utf-8")
    call = read_call(path)
    assert (len(call.rows), call.row_count, call.frames) == (MAX_ROWS, 3001, 6000)
    for d in call.snapshot.directions.values():
        assert len(d.series) <= MAX_POINTS
    found = structure(page)
    assert found.rows["messages"] == 1 + MAX_ROWS
    assert found.svg["timeline-svg"]["rect.msg-density"] <= MAX_POINTS
    assert len(page) < 2_000_000, len(page)
    print(
        f"long capture: {path.stat().st_size:,} bytes read, {len(page):,} written in {took:.1f} s"
    )


def _counts(page: Any) -> Any:
    script = """() => {
      const count = (selector) => document.querySelectorAll(selector).length;
      const drawn = [...document.querySelectorAll('svg')].map(
        (svg) => [svg.id, svg.getBBox().width > 0 && svg.getBoundingClientRect().height > 0]);
      const bars = [...document.querySelectorAll('#latency-svg rect.bar')].map(
        (bar) => bar.getBBox().height);
      return {
        drawn, bars,
        turns: count('#timeline-svg rect.turn:not(.unanswered)'),
        unanswered: count('#timeline-svg rect.turn.unanswered'),
        tools: count('#timeline-svg rect.tool'),
        resumes: count('#timeline-svg rect.resume'),
        messages: count('#timeline-svg line.msg'),
        jitter: count('#jitter-svg polyline.jitter'),
        gaps: count('#jitter-svg rect.gap'),
        cells: [...document.querySelectorAll('#statistics td')].map((td) => td.textContent),
      };
    }"""
    return page.evaluate(script)


def test_the_pages_render_in_chromium_without_a_console_error(
    demo: Path, capture: Path, tmp_path: Path
) -> None:
    pages = {}
    for name, path in (
        ("brisvox", demo / "brisvox.jsonl"),
        ("ovp", demo / "ovp.jsonl"),
        ("scripted", capture),
    ):
        call = read_call(path)
        (tmp_path / f"{name}.html").write_text(render_page(call), encoding="utf-8")
        pages[name] = call

    async def drive() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with serve_folder(tmp_path) as site:
            async with chromium_page() as page:
                requests: list[str] = []
                page.on("request", lambda request: requests.append(request.url))
                for name in pages:
                    requests.clear()
                    await page.goto(f"{site}/{name}.html")
                    seen[name] = await _counts(page)
                    seen[name]["requests"] = list(requests)
                seen["console"] = list(page.console_lines)
                seen["site"] = site
        return seen

    seen = asyncio.run(asyncio.wait_for(drive(), 90))
    assert seen["console"] == []
    for name, call in pages.items():
        assert seen[name]["requests"] == [f"{seen['site']}/{name}.html"]
        _check_drawn(call, seen[name])
    assert seen["scripted"]["gaps"] == 1 and seen["scripted"]["resumes"] == 1
    assert "250.0 ms" in " ".join(seen["scripted"]["cells"])


def _check_drawn(call: report.Call, got: dict[str, Any]) -> None:
    """What Chromium drew of ``call`` is what its statistics call for."""
    s = call.snapshot
    assert all(drawn for _, drawn in got["drawn"]), got["drawn"]
    assert got["turns"] == sum(t.answered_at is not None for t in s.turn_list)
    assert got["unanswered"] == sum(t.answered_at is None for t in s.turn_list)
    assert (got["tools"], got["resumes"]) == (len(s.tool_list), len(s.resume_list))
    assert got["messages"] == sum(r.sender is not None for r in call.rows)
    heights = got["bars"]
    assert len(heights) == len(LATENCY_BOUNDS_MS) + 1
    assert [h > 0 for h in heights] == [c > 0 for c in s.turn_latency.histogram]
    a, b = s.directions.values()
    assert got["cells"][:3] == ["messages read", f"{a.messages:,}", f"{b.messages:,}"]
    audio = any(d.frames for d in s.directions.values())
    assert (got["jitter"] >= 1) is audio
    assert got["gaps"] == sum(bool(p.missing) for d in s.directions.values() for p in d.series)


@pytest.mark.parametrize("extra", [0, 1])
def test_a_row_shows_a_message_up_to_its_bound_and_cuts_a_longer_one(
    protocols: dict[str, Protocol], tmp_path: Path, extra: int
) -> None:
    s = Script(protocols)
    s.message(0.0, "server", "session.start", 0, 0.0)
    text = "x" * (report.SUMMARY_CHARS + extra)  # no message: the row shows its text all the same
    s.lines.append(json.dumps({"t": 0.1, "from": "server", "text": text}))
    row = read_call(s.write(tmp_path / "long-text.jsonl")).rows[1]
    expected = text if not extra else text[: report.SUMMARY_CHARS - 1] + "…"
    assert (row.type, row.text, len(row.text)) == ("unreadable", expected, report.SUMMARY_CHARS)
