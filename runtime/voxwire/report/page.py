"""The HTML page of a call report: one file, no network, no script, pictures as inline SVG.

:func:`render_page` turns a :class:`~voxwire.report.Call` into the page: a timeline of both
directions (messages, audio, turns, tool calls, resumes, gaps and violations), the turn latency
histogram, the jitter and gap plot, the statistics' table, the turns, tool calls and resumes, the
validation's verdicts with their times, and the messages. The same call gives the same bytes.
Every element a test or a reader may look for has a class: ``turn``, ``tool``, ``resume``,
``gap``, ``violation``, ``note``, ``msg``, ``audio``, ``bar``, ``jitter``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Final

from voxwire.observe.snapshot import LATENCY_BOUNDS_MS, Direction, Point, Snapshot
from voxwire.report import MAX_ROWS, MAX_VERDICTS, Call

__all__ = ["render_page"]

WIDTH: Final = 960
LABELS: Final = 130
"""The width of the lane labels left of the timeline."""
PLOT: Final = WIDTH - LABELS - 20
NONE: Final = "\N{EN DASH}"
"""What a table shows where a figure has no value yet."""

_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1d2330}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
table{border-collapse:collapse;margin:6px 0}td,th{border-bottom:1px solid #dde;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f2f3f7}td.n{text-align:right;
font-variant-numeric:tabular-nums}code,td.text{font:12px ui-monospace,monospace;
word-break:break-all}
svg{display:block;margin:6px 0;background:#fbfbfd;border:1px solid #e3e4ea}
svg text{font:11px system-ui,sans-serif;fill:#444}.axis{stroke:#99a}.msg{stroke:#3b5bdb}
.audio{fill:#74c0fc}.turn{fill:#37b24d}.turn.unanswered{fill:#f08c00}.tool{fill:#7950f2}
.tool-error{fill:#e03131}.tool-cancelled{fill:#adb5bd}.tool-open{fill:#fab005}
.resume{fill:#ffe066;fill-opacity:.45}.gap{fill:#e03131}.violation{fill:#c92a2a}.note{fill:#868e96}
.link{stroke:#495057;stroke-dasharray:3 2}.bar{fill:#4c6ef5}.jitter{fill:none;stroke-width:1.5}
.jitter-0{stroke:#1971c2}.jitter-1{stroke:#e8590c}
.key-0{fill:#1971c2}.key-1{fill:#e8590c}.bad{color:#c92a2a}.muted{color:#667}
"""


def render_page(call: Call) -> str:
    """The report of ``call``, a whole HTML document."""
    s = call.snapshot
    listed = frozenset(r.line for r in call.rows)
    title = f"voxwire report: {call.name}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',  # no icon to fetch: the page asks for nothing
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>{escape(title)}</h1>{_summary(call)}</header>",
        _section("timeline", "Timeline", _timeline(call, listed), _legend()),
        _section("statistics", "Statistics", _statistics(call)),
        _section("latency", "Turn latency", _histogram(s)),
        _section("audio", "Audio: jitter and gaps", _jitter(s)),
        _section("turns", "Turns", _turns(s)),
        _section("tools", "Tool calls", _tools(s)),
        _section("resumes", "Resumes", _resumes(s)),
        _section("verdicts", "Validation", _verdicts(call, listed)),
        _section("messages", "Messages and link events", _messages(call)),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# -- text ---------------------------------------------------------------------------------


def _summary(call: Call) -> str:
    h, s = call.header, call.snapshot
    recorder = h.recorded_by or "unknown"
    verdict = (
        f'<span class="bad">{_count(call.violations, "violation")}</span>'
        if call.violations
        else "no violation"
    )
    return (
        f"<p>{escape(h.protocol)} capture (version {h.version}), recorded by "
        f"{escape(recorder)}: {_seconds(s.duration)}, {_count(call.messages, 'message')}, "
        f"{_count(call.frames, 'frame')}, {_count(call.link_events, 'link event')}; "
        f"{verdict}, {_count(call.notes, 'note')}.</p>"
    )


def _section(anchor: str, title: str, *body: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>\n' + "\n".join(body) + "</section>"


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _seconds(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f} s"


def _ms(value: float | None) -> str:
    return NONE if value is None else f"{value * 1000:.1f} ms"


def _jitter_ms(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f} ms"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], ids: Sequence[str] = ()) -> str:
    """A table; cells are HTML already. ``ids``: an id per row, where given."""
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        anchor = f' id="{ids[i]}"' if i < len(ids) else ""
        out.append(f"<tr{anchor}>" + "".join(row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _n(value: int | str) -> str:
    text = f"{value:,}" if isinstance(value, int) else escape(value)
    return f'<td class="n">{text}</td>'


def _td(text: str, cls: str = "") -> str:
    return f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>"


def _statistics(call: Call) -> str:
    s = call.snapshot
    a, b = s.directions.values()
    rows: list[tuple[str, int | str, int | str]] = [
        ("messages read", a.messages, b.messages),
        ("bytes of messages", a.message_bytes, b.message_bytes),
        ("unreadable messages and frames", a.unreadable, b.unreadable),
        (
            "seq gaps (numbers skipped)",
            _pair(a.seq_gaps, a.seq_missing),
            _pair(b.seq_gaps, b.seq_missing),
        ),
        ("seq repeats", a.seq_repeats, b.seq_repeats),
    ]
    if a.frames or b.frames:
        rows += [
            ("audio frames", a.frames, b.frames),
            ("audio", _seconds(a.audio_s), _seconds(b.audio_s)),
            ("silence", _seconds(a.silence_s), _seconds(b.silence_s)),
            (
                "frame gaps (frames missing)",
                _pair(a.frame_gaps, a.frames_missing),
                _pair(b.frame_gaps, b.frames_missing),
            ),
            ("late frames", a.frames_late, b.frames_late),
            ("jitter, last (RFC 3550)", _jitter_ms(a.jitter_ms), _jitter_ms(b.jitter_ms)),
            ("jitter, highest", _jitter_ms(a.jitter_max_ms), _jitter_ms(b.jitter_max_ms)),
        ]
    per_side = _table(
        ("figure", f"from {a.sender}", f"from {b.sender}"),
        ([_td(f), _n(x), _n(y)] for f, x, y in rows),
    )
    latency, tools = s.turn_latency, s.tool_durations
    open_calls = s.tool_calls - sum(s.tool_outcomes.values())
    outcomes = ", ".join(f"{k} {v:,}" for k, v in s.tool_outcomes.items())
    session: list[tuple[str, str]] = [
        ("duration", _seconds(s.duration)),
        ("links (lost)", f"{s.links:,} ({s.link_losses:,})"),
        ("turns (answered)", f"{s.turns:,} ({s.turns_answered:,})"),
        (
            "turn latency: mean, lowest, highest",
            f"{_ms(latency.mean)}, {_ms(latency.minimum)}, {_ms(latency.maximum)}",
        ),
        ("tool calls", f"{s.tool_calls:,}: {outcomes}, no outcome {open_calls:,}"),
        ("tool call duration: mean, highest", f"{_ms(tools.mean)}, {_ms(tools.maximum)}"),
        ("resumes", f"{s.resumes:,}"),
        ("events replayed", f"{s.events_replayed:,}"),
        ("events lost", f"{s.events_lost:,}"),
    ]
    whole = _table(("figure", "value"), ([_td(f), _n(v)] for f, v in session))
    return per_side + whole


def _pair(count: int, within: int) -> str:
    return f"{count:,} ({within:,})"


def _turns(s: Snapshot) -> str:
    if not s.turns:
        return '<p class="muted">No user turn ended.</p>'
    return _listed(s.turns, len(s.turn_list), "turns") + _table(
        ("#", "user's turn ended", "answered", "latency"),
        (
            [_n(i + 1), _n(_seconds(x.ended_at)), _n(_seconds(x.answered_at)), _n(_ms(x.latency))]
            for i, x in enumerate(s.turn_list)
        ),
    )


def _tools(s: Snapshot) -> str:
    if not s.tool_calls:
        return '<p class="muted">No tool call.</p>'
    return _listed(s.tool_calls, len(s.tool_list), "tool calls") + _table(
        ("key", "tool", "started", "ended", "outcome", "duration", "stated"),
        (
            [
                _td(c.key, "text"),
                _td(c.name),
                _n(_seconds(c.started_at)),
                _n(_seconds(c.ended_at)),
                _td(c.outcome or "none"),
                _n(_ms(c.duration)),
                _n(NONE if c.stated_ms is None else f"{c.stated_ms:,} ms"),
            ]
            for c in s.tool_list
        ),
    )


def _resumes(s: Snapshot) -> str:
    if not s.resumes:
        return '<p class="muted">No resume.</p>'
    return _listed(s.resumes, len(s.resume_list), "resumes") + _table(
        ("link lost", "resumed", "outage", "events replayed", "events lost"),
        (
            [
                _n(_seconds(r.lost_at)),
                _n(_seconds(r.resumed_at)),
                _n(_ms(r.duration)),
                _n(r.replayed),
                _n(r.events_lost),
            ]
            for r in s.resume_list
        ),
    )


def _listed(total: int, listed: int, what: str) -> str:
    if listed == total:
        return ""
    return f'<p class="muted">The first {listed:,} of {total:,} {what} are listed.</p>'


def _verdicts(call: Call, listed_lines: frozenset[int]) -> str:
    found = len(call.verdicts)
    if not found:
        return "<p>voxwire validate finds no violation and nothing to note.</p>"
    head = f"<p>{_count(call.violations, 'violation')}, {_count(call.notes, 'note')}.</p>"
    listed = _listed(call.violations + call.notes, found, "findings")
    rows = []
    for v in call.verdicts:
        line = f'<a href="#line-{v.line}">{v.line}</a>' if v.line in listed_lines else str(v.line)
        cls = "muted" if v.code == "note" else "bad"
        rows.append(
            [f'<td class="n">{line}</td>', _n(_seconds(v.t)), _td(v.code, cls), _td(v.text)]
        )
    return head + listed + _table(("line", "time", "code", "what"), rows)


def _messages(call: Call) -> str:
    listed = ""
    if not call.complete:
        listed = (
            f'<p class="muted">The first {len(call.rows):,} of {call.row_count:,} messages and '
            f"link events are listed (at most {MAX_ROWS:,}); audio frames are drawn above.</p>"
        )
    return listed + _table(
        ("line", "time", "from", "type", "seq", "text"),
        (
            [
                _n(r.line),
                _n(_seconds(r.t)),
                _td(r.sender or "link"),
                _td(r.type),
                _n("" if r.seq is None else r.seq),
                _td(r.text, "text"),
            ]
            for r in call.rows
        ),
        [f"line-{r.line}" for r in call.rows],
    )


# -- pictures -----------------------------------------------------------------------------


def _svg(anchor: str, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg id="{anchor}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _f(value: float) -> str:
    return f"{value:.1f}"


def _rect(x: float, y: float, w: float, h: float, cls: str, title: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return (
        f'<rect class="{cls}" x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 1.5))}" '
        f'height="{_f(h)}">{tip}</rect>'
    )


def _text(x: float, y: float, text: str, anchor: str = "start") -> str:
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}">{escape(text)}</text>'


def _step(span: float) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving at most ten ticks."""
    raw = span / 10
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


class _Scale:
    """Seconds of the capture to x on the plot."""

    def __init__(self, end: float) -> None:
        self.end = max(end, 0.001)

    def x(self, t: float) -> float:
        return LABELS + min(max(t, 0.0), self.end) / self.end * PLOT

    def axis(self, y: float) -> list[str]:
        step = _step(self.end)
        out = [f'<line class="axis" x1="{LABELS}" y1="{_f(y)}" x2="{LABELS + PLOT}" y2="{_f(y)}"/>']
        for i in range(int(self.end / step + 1e-9) + 1):
            x = self.x(i * step)
            out.append(
                f'<line class="axis" x1="{_f(x)}" y1="{_f(y)}" x2="{_f(x)}" y2="{_f(y + 4)}"/>'
            )
            out.append(_text(x, y + 15, f"{i * step:g} s", "middle"))
        return out


def _timeline(call: Call, listed: frozenset[int]) -> str:
    s = call.snapshot
    scale = _Scale(s.last_at or 0.0)
    audio = any(d.frames for d in s.directions.values())
    lanes: list[tuple[str, int]] = []
    for d in s.directions.values():
        lanes.append((f"from {d.sender}", 24))
        if audio:
            lanes.append((f"audio from {d.sender}", 30))
    lanes += [("turns", 18), ("tool calls", 18), ("validation", 14)]
    top = {name: 10 + sum(h + 8 for _, h in lanes[:i]) for i, (name, _) in enumerate(lanes)}
    height = 10 + sum(h + 8 for _, h in lanes)
    body: list[str] = []
    for r in s.resume_list:
        start = r.lost_at if r.lost_at is not None else r.resumed_at
        body.append(
            _rect(
                scale.x(start),
                4,
                scale.x(r.resumed_at) - scale.x(start),
                height - 6,
                "resume",
                f"resumed at {_seconds(r.resumed_at)} after {_ms(r.duration)}: "
                f"{r.replayed} events replayed, {r.events_lost} lost",
            )
        )
    for name, h in lanes:
        body.append(_text(8, top[name] + h / 2 + 4, name))
    for row in call.rows:
        if row.sender is None:
            x = _f(scale.x(row.t))
            body.append(
                f'<line class="link" x1="{x}" y1="4" x2="{x}" y2="{height - 2}">'
                f"<title>{escape(row.type)} at {_seconds(row.t)}</title></line>"
            )
    for d in s.directions.values():
        body += _message_lane(call, d, scale, top[f"from {d.sender}"], 24)
        if audio:
            body += _audio_lane(d, scale, top[f"audio from {d.sender}"], 30)
    y = top["turns"]
    for turn in s.turn_list:
        if turn.answered_at is None:
            body.append(
                _rect(
                    scale.x(turn.ended_at),
                    y,
                    4,
                    18,
                    "turn unanswered",
                    f"turn ended at {_seconds(turn.ended_at)}, unanswered",
                )
            )
        else:
            width = scale.x(turn.answered_at) - scale.x(turn.ended_at)
            body.append(
                _rect(
                    scale.x(turn.ended_at),
                    y,
                    width,
                    18,
                    "turn",
                    f"turn ended at {_seconds(turn.ended_at)}, answered after {_ms(turn.latency)}",
                )
            )
    y = top["tool calls"]
    for c in s.tool_list:
        end = c.ended_at if c.ended_at is not None else scale.end
        outcome = c.outcome or "open"
        body.append(
            _rect(
                scale.x(c.started_at),
                y,
                scale.x(end) - scale.x(c.started_at),
                18,
                f"tool tool-{outcome}",
                f"{c.name} ({c.key}): {outcome}, {_ms(c.duration)}",
            )
        )
    y = top["validation"]
    for v in call.verdicts:
        if v.t is None:
            continue
        cls = "note" if v.code == "note" else "violation"
        mark = _rect(scale.x(v.t) - 2, y, 4, 14, cls, f"line {v.line}: {v.code}: {v.text}")
        body.append(f'<a href="#line-{v.line}">{mark}</a>' if v.line in listed else mark)
    body += scale.axis(height - 4)
    return _svg("timeline-svg", height + 16, body, "timeline of the call")


def _message_lane(call: Call, d: Direction, scale: _Scale, y: int, h: int) -> list[str]:
    if call.complete:
        out = []
        for row in call.rows:
            if row.sender == d.sender:
                x = _f(scale.x(row.t))
                out.append(
                    f'<a href="#line-{row.line}"><line class="msg" x1="{x}" y1="{y}" '
                    f'x2="{x}" y2="{y + h}"><title>{escape(row.type)} at '
                    f"{_seconds(row.t)}</title></line></a>"
                )
        return out
    most = max((p.messages for p in d.series), default=1) or 1
    return [
        _rect(
            scale.x(p.t),
            y + h - h * p.messages / most,
            scale.x(p.t + p.width) - scale.x(p.t),
            h * p.messages / most,
            "msg-density",
            f"{p.messages} messages from {_seconds(p.t)}",
        )
        for p in d.series
        if p.messages
    ]


def _audio_lane(d: Direction, scale: _Scale, y: int, h: int) -> list[str]:
    most = max((p.frames for p in d.series), default=1) or 1
    out = []
    for p in d.series:
        left, right = scale.x(p.t), scale.x(p.t + p.width)
        if p.frames:
            size = h * p.frames / most
            out.append(
                _rect(
                    left,
                    y + h - size,
                    right - left,
                    size,
                    "audio",
                    f"{p.frames} frames from {_seconds(p.t)}",
                )
            )
        if p.missing:
            out.append(
                _rect(
                    left,
                    y,
                    3,
                    h,
                    "gap",
                    f"{p.missing} frames missing before {_seconds(p.t + p.width)}",
                )
            )
    return out


def _histogram(s: Snapshot) -> str:
    counts = s.turn_latency.histogram
    labels = [f"≤{b:,}" for b in LATENCY_BOUNDS_MS] + [f">{LATENCY_BOUNDS_MS[-1]:,}"]
    height, base, most = 220, 180, max(max(counts), 1)
    slot = PLOT / len(counts)
    body = [_text(8, 20, "turns"), _text(8, base + 32, "ms")]
    for i, (count, label) in enumerate(zip(counts, labels, strict=True)):
        x = LABELS + i * slot
        size = (base - 30) * count / most
        body.append(_rect(x + 4, base - size, slot - 8, size, "bar", f"{count} turns {label} ms"))
        body.append(_text(x + slot / 2, base - size - 4, f"{count:,}", "middle"))
        body.append(_text(x + slot / 2, base + 16, label, "middle"))
    body.append(f'<line class="axis" x1="{LABELS}" y1="{base}" x2="{LABELS + PLOT}" y2="{base}"/>')
    return _svg("latency-svg", height, body, "histogram of the turn latencies")


def _jitter(s: Snapshot) -> str:
    if not any(d.frames for d in s.directions.values()):
        return '<p class="muted">No audio frames in this capture.</p>'
    scale = _Scale(s.last_at or 0.0)
    height, base, gaps = 240, 190, 200
    most = max((d.jitter_max_ms or 0.0 for d in s.directions.values()), default=0.0) or 1.0
    body = [_text(8, 20, f"jitter (ms), up to {most:.3f}"), _text(8, gaps + 10, "gaps")]
    rise = (base - 30) / most
    for i, d in enumerate(s.directions.values()):
        for run in _runs(d):
            points = " ".join(
                f"{_f(scale.x(p.t + p.width / 2))},{_f(base - rise * (p.jitter_ms or 0.0))}"
                for p in run
            )
            body.append(
                f'<polyline class="jitter jitter-{i}" points="{points}">'
                f"<title>jitter of the frames from {escape(d.sender)}</title></polyline>"
            )
        body.append(
            f'<text class="key-{i}" x="{LABELS + PLOT - 4}" y="{20 + 14 * i}" '
            f'text-anchor="end">from {escape(d.sender)}</text>'
        )
        for p in d.series:
            if p.missing:
                body.append(
                    _rect(
                        scale.x(p.t),
                        gaps,
                        3,
                        12,
                        "gap",
                        f"{p.missing} frames from {d.sender} missing at {_seconds(p.t)}",
                    )
                )
    body.append(f'<line class="axis" x1="{LABELS}" y1="{base}" x2="{LABELS + PLOT}" y2="{base}"/>')
    body += scale.axis(height - 22)
    return _svg("jitter-svg", height, body, "jitter and gaps of the audio frames")


def _runs(d: Direction) -> list[list[Point]]:
    """The points with a jitter, in runs of adjacent buckets: no line is drawn across a time
    without frames."""
    runs: list[list[Point]] = []
    for p in d.series:
        if p.jitter_ms is None:
            continue
        last = runs[-1][-1] if runs else None
        if last is not None and round((p.t - last.t) / p.width) == 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _legend() -> str:
    return (
        '<p class="muted">Lines: messages (hover for the type, click for the line); blue bars: '
        "audio frames; green: a user's turn until its answer (orange: unanswered); violet: tool "
        "calls (red: error, grey: cancelled, yellow: no outcome); yellow band: a link down until "
        f"its resume; red: missing frames and violations. At most {MAX_VERDICTS:,} findings are "
        "drawn.</p>"
    )
