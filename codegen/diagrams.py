"""Diagrams drawn from the spec: sequence diagrams of its flows, the frame layout, and the
roles' session machines (as pictures and as tables).

The flows are loaded and checked against the spec by :mod:`codegen.flows`, so a diagram cannot
drift from the spec.

The pictures are SVG written here, as text: no JavaScript, no network, no drawing tool, the same
bytes on every machine. Text is measured with a fixed estimate of the font's advance, so layouts
are deterministic (generous, never tight).
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from codegen.flows import Flow
from codegen.ir import Frame
from codegen.machines import Machine

__all__ = ["Edge", "frame_svg", "machine_markdown", "sequence_svg", "state_svg"]

_FONT = 'font-family="ui-sans-serif, system-ui, sans-serif"'
_MONO = 'font-family="ui-monospace, SFMono-Regular, Menlo, monospace"'
_CHAR_WIDTH = 7.4
"""Advance of one character at 13 px, a little over the widest common sans-serif's average."""
_MONO_WIDTH = 7.9
_INK = "#1f2937"
_MUTED = "#6b7280"
_ACCENT = "#3f51b5"
_NOTE = "#fff8c5"
_NOTE_EDGE = "#d4a72c"


def _text_width(text: str, mono: bool = False) -> float:
    return len(text) * (_MONO_WIDTH if mono else _CHAR_WIDTH)


def _wrap(text: str, width: float) -> list[str]:
    """``text`` in lines no wider than ``width`` pixels (at least one word a line)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if line and _text_width(candidate) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    return [*lines, line] if line else lines


def _svg(width: float, height: float, label: str, body: list[str], defs: str = "") -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}"'
            f' viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label={quoteattr(label)}>',
            f"<title>{escape(label)}</title>",
            *([f"<defs>{defs}</defs>"] if defs else []),
            *body,
            "</svg>",
        ]
    )


def _arrowhead(marker_id: str) -> str:
    """An arrowhead marker; its id is unique on a page that shows several diagrams."""
    return (
        f'<marker id="{marker_id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8"'
        f' markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"'
        f' fill="{_INK}"/></marker>'
    )


def sequence_svg(flow: Flow) -> str:
    """A sequence diagram of ``flow``: participants as columns, steps top to bottom."""
    ids = [pid for pid, _ in flow.participants]
    labels = dict(flow.participants)
    marker = f"arrow-{flow.id}"
    widest_arrow = max(
        (
            max(_text_width(s.label, mono=True), _text_width(s.detail))
            for s in flow.steps
            if s.source is not None
        ),
        default=0.0,
    )
    box_width = max(140.0, *(_text_width(label) + 28 for label in labels.values()))
    gap = max(box_width + 40, widest_arrow + 48)
    margin = 20.0
    xs = {pid: margin + box_width / 2 + i * gap for i, pid in enumerate(ids)}
    width = margin * 2 + box_width + gap * (len(ids) - 1)
    body: list[str] = []
    y = 56.0
    rows: list[str] = []
    extent = width
    for step in flow.steps:
        if step.source is not None and step.target is not None:
            x1, x2 = xs[step.source], xs[step.target]
            # An HTTP response (a status line) and a close answer; requests and messages are solid.
            dashed = step.kind == "close" or (step.kind == "http" and step.label[:3].isdigit())
            mono = step.kind in ("message", "frame")
            dash = ' stroke-dasharray="6 4"' if dashed else ""
            label_y = y + 16
            middle = (x1 + x2) / 2
            rows.append(
                f'<text x="{middle:.1f}" y="{label_y:.1f}" text-anchor="middle" font-size="13"'
                f' {_MONO if mono else _FONT} fill="{_ACCENT if step.kind == "message" else _INK}"'
                f' font-weight="{"600" if step.kind == "message" else "400"}"'
                f' class="step step-{step.kind}">{escape(step.label)}</text>'
            )
            line_y = label_y + 8
            if step.detail:
                rows.append(
                    f'<text x="{middle:.1f}" y="{label_y + 22:.1f}" text-anchor="middle"'
                    f' font-size="12" {_FONT} fill="{_MUTED}">{escape(step.detail)}</text>'
                )
                line_y = label_y + 30
            rows.append(
                f'<line x1="{x1:.1f}" y1="{line_y:.1f}" x2="{x2:.1f}" y2="{line_y:.1f}"'
                f' stroke="{_INK}" stroke-width="1.4"{dash}'
                f' marker-end="url(#{marker})"/>'
            )
            y = line_y + 14
            continue
        left = min(xs[p] for p in step.over) - box_width / 2 + 10
        right = max(xs[p] for p in step.over) + box_width / 2 - 10
        if len(step.over) == 1:
            # A note on one lifeline may be wider than its box, up to most of a gap.
            half = min(max(right - left, _text_width(step.label) + 24), gap - 24, 300.0) / 2
            centre = xs[step.over[0]]
            left, right = max(4.0, centre - half), centre + half
            extent = max(extent, right + 4)
        if step.kind == "drop":
            rows.append(
                f'<line x1="{left:.1f}" y1="{y + 14:.1f}" x2="{right:.1f}" y2="{y + 14:.1f}"'
                f' stroke="#c62828" stroke-width="2" stroke-dasharray="2 5"/>'
            )
            rows.append(
                f'<text x="{(left + right) / 2:.1f}" y="{y + 32:.1f}" text-anchor="middle"'
                f' font-size="12" {_FONT} fill="#c62828" class="step step-drop">'
                f"{escape(step.label)}</text>"
            )
            y += 46
            continue
        lines = _wrap(step.label, right - left - 16)
        note_height = 12 + 16 * len(lines)
        rows.append(
            f'<rect x="{left:.1f}" y="{y + 4:.1f}" width="{right - left:.1f}"'
            f' height="{note_height}" rx="3" fill="{_NOTE}" stroke="{_NOTE_EDGE}"/>'
        )
        for n, line in enumerate(lines):
            rows.append(
                f'<text x="{(left + right) / 2:.1f}" y="{y + 20 + 16 * n:.1f}"'
                f' text-anchor="middle" font-size="12" {_FONT} fill="{_INK}"'
                f' class="step step-note">{escape(line)}</text>'
            )
        y += note_height + 14
    height = y + 20
    for pid in ids:
        x = xs[pid]
        body.append(
            f'<line x1="{x:.1f}" y1="44" x2="{x:.1f}" y2="{height - 8:.1f}" stroke="{_MUTED}"'
            ' stroke-width="1" stroke-dasharray="4 4"/>'
        )
        body.append(
            f'<rect x="{x - box_width / 2:.1f}" y="8" width="{box_width:.1f}" height="36" rx="4"'
            f' fill="#e8eaf6" stroke="{_ACCENT}"/>'
        )
        body.append(
            f'<text x="{x:.1f}" y="31" text-anchor="middle" font-size="13" {_FONT}'
            f' font-weight="600" fill="{_INK}" class="participant">{escape(labels[pid])}</text>'
        )
    label = f"Sequence diagram: {flow.title}"
    return _svg(max(width, extent), height, label, body + rows, _arrowhead(marker))


def frame_svg(frame: Frame) -> str:
    """The frame layout as a picture: the header's bytes to scale, the payload, the flag bits."""
    byte_width = 64.0
    margin = 20.0
    header = [f for f in frame.fields if f.kind != "bytes"]
    payload = [f for f in frame.fields if f.kind == "bytes"]
    header_bytes = sum(f.size for f in header)
    payload_width = 260.0
    width = margin * 2 + header_bytes * byte_width + payload_width
    top = 48.0
    row = 54.0
    body: list[str] = []
    x = margin
    flags_box: tuple[float, float] | None = None
    for f in frame.fields:
        w = payload_width if f.kind == "bytes" else f.size * byte_width
        kind = f"{f.kind} × {f.size}" if f.kind == "bytes" else f.kind
        dash = ' stroke-dasharray="6 3"' if f.kind == "bytes" else ""
        body.append(
            f'<rect x="{x:.1f}" y="{top:.1f}" width="{w:.1f}" height="{row}" fill="'
            f'{"#f3f4f6" if f.kind == "bytes" else "#e8eaf6"}" stroke="{_ACCENT}"'
            f"{dash}/>"
        )
        body.append(
            f'<text x="{x + w / 2:.1f}" y="{top + 23:.1f}" text-anchor="middle" font-size="13"'
            f' {_MONO} font-weight="600" fill="{_INK}" class="field">{escape(f.name)}</text>'
        )
        body.append(
            f'<text x="{x + w / 2:.1f}" y="{top + 41:.1f}" text-anchor="middle" font-size="11"'
            f' {_FONT} fill="{_MUTED}">{escape(kind)}</text>'
        )
        body.append(
            f'<text x="{x:.1f}" y="{top - 8:.1f}" text-anchor="middle" font-size="11"'
            f' {_MONO} fill="{_INK}" class="offset">{f.offset}</text>'
        )
        if f.flags:
            flags_box = (x, w)
        x += w
    body.append(
        f'<text x="{x:.1f}" y="{top - 8:.1f}" text-anchor="middle" font-size="11" {_MONO}'
        f' fill="{_INK}" class="offset">{frame.size}</text>'
    )
    bottom = top + row
    if payload:
        body.append(
            f'<text x="{margin + header_bytes * byte_width / 2:.1f}" y="14"'
            f' text-anchor="middle" font-size="12" {_FONT} fill="{_MUTED}">'
            f"header: {header_bytes} bytes, {frame.byte_order}-endian</text>"
        )
        p = payload[0]
        body.append(
            f'<text x="{margin + header_bytes * byte_width + payload_width / 2:.1f}"'
            f' y="14" text-anchor="middle" font-size="12" {_FONT}'
            f' fill="{_MUTED}">bytes {p.offset} to {p.offset + p.size - 1} (not to scale)</text>'
        )
    height = bottom + 16
    flagged = next((f for f in frame.fields if f.flags), None)
    if flagged is not None and flags_box is not None:
        bit_width = 112.0
        bits_top = bottom + 64
        bits_left = margin
        fx, fw = flags_box
        body.append(
            f'<path d="M{fx:.1f},{bottom:.1f} L{bits_left:.1f},{bits_top:.1f} M{fx + fw:.1f},'
            f'{bottom:.1f} L{bits_left + 8 * bit_width:.1f},{bits_top:.1f}" stroke="{_MUTED}"'
            ' stroke-dasharray="3 3" fill="none"/>'
        )
        names = {bit: name for bit, name, _ in flagged.flags}
        for i in range(8):
            bit = 7 - i
            bx = bits_left + i * bit_width
            name = names.get(bit, "0 (reserved)")
            body.append(
                f'<rect x="{bx:.1f}" y="{bits_top:.1f}" width="{bit_width:.1f}" height="58"'
                f' fill="{"#e8eaf6" if bit in names else "#f9fafb"}" stroke="{_ACCENT}"/>'
            )
            body.append(
                f'<text x="{bx + bit_width / 2:.1f}" y="{bits_top + 18:.1f}" text-anchor="middle"'
                f' font-size="11" {_FONT} fill="{_MUTED}">bit {bit}</text>'
            )
            lines = _split_name(name, bit_width - 10)
            for n, line in enumerate(lines):
                body.append(
                    f'<text x="{bx + bit_width / 2:.1f}" y="{bits_top + 36 + 13 * n:.1f}"'
                    f' text-anchor="middle" font-size="11" {_MONO} fill="{_INK}"'
                    f' class="flag">{escape(line)}</text>'
                )
        body.append(
            f'<text x="{bits_left:.1f}" y="{bits_top - 8:.1f}" font-size="12" {_FONT}'
            f' fill="{_MUTED}">{escape(flagged.name)} (byte {flagged.offset}), most significant'
            " bit first</text>"
        )
        height = bits_top + 58 + 16
        width = max(width, bits_left + 8 * bit_width + margin)
    return _svg(width, height, f"Frame layout: {frame.name}, {frame.size} bytes", body)


def _split_name(name: str, width: float) -> list[str]:
    """``name`` on one line, or two split after the ``_`` nearest its middle when too wide."""
    if _text_width(name, mono=True) * 11 / 13 <= width or "_" not in name:
        return [name]
    cuts = [i + 1 for i, c in enumerate(name) if c == "_"]
    cut = min(cuts, key=lambda i: abs(len(name) / 2 - i))
    return [name[:cut], name[cut:]]


@dataclass(frozen=True)
class Edge:
    """A transition of a state machine: from one state to another, on these inputs."""

    source: str
    target: str
    inputs: tuple[str, ...]


def machine_markdown(machine: Machine, decisions_page: str) -> str:
    """A role's session machine as a Markdown table: state, input, next state, actions, and the
    decision a transition follows (linked into ``decisions_page``); below it, what each input
    and action means."""
    rows = ["| state | input | next state | actions | decision |", "|---|---|---|---|---|"]
    for t in machine.transitions:
        actions = ", ".join(f"`{a}`" for a in t.actions) or "-"
        decision = f"[{t.decision}]({decisions_page}#decision-{t.decision})" if t.decision else ""
        rows.append(f"| `{t.source}` | `{t.input}` | `{t.target}` | {actions} | {decision} |")
    terms = [f"- `{i.id}`: {i.summary}" for i in machine.inputs]
    terms += [f"- action `{a.id}`: {a.summary}" for a in machine.actions]
    final = ", ".join(f"`{s}`" for s in machine.final)
    groups = [f"- `{g.id}`: {g.summary} ({', '.join(g.states)})" for g in machine.groups]
    return "\n".join(
        [
            *rows,
            "",
            f"Inputs and actions of the {machine.role} (final: {final}):",
            "",
            *terms,
            "",
            "State groups:",
            "",
            *groups,
        ]
    )


def state_svg(title: str, states: list[str], edges: list[Edge]) -> str:
    """A state machine as a picture: states top to bottom in their declared order, each
    transition an arc (forward ones on the right, backward ones on the left, a loop for a state
    that stays), numbered; the numbers' inputs are listed beside the picture.

    Drawn from a core's transition table (see ``docs/hooks/diagrams.py``), so the picture
    is the table.
    """
    margin, box_width, box_height, pitch, lane = 20.0, 200.0, 40.0, 76.0, 26.0
    index = {state: i for i, state in enumerate(states)}
    pairs: dict[tuple[str, str], list[str]] = {}
    for edge in edges:
        pairs.setdefault((edge.source, edge.target), []).extend(edge.inputs)
    backward = [p for p in pairs if index[p[1]] < index[p[0]]]
    forward = [p for p in pairs if index[p[1]] > index[p[0]]]
    left_lanes = len(backward)
    box_x = margin + left_lanes * lane + (12 if backward else 0)
    centre = box_x + box_width / 2
    top = 44.0

    def y_of(state: str) -> float:
        return top + index[state] * pitch

    body: list[str] = []
    for state in states:
        y = y_of(state)
        body.append(
            f'<rect x="{box_x:.1f}" y="{y:.1f}" width="{box_width}" height="{box_height}" rx="18"'
            f' fill="#e8eaf6" stroke="{_ACCENT}" stroke-width="1.4"/>'
        )
        body.append(
            f'<text x="{centre:.1f}" y="{y + 25:.1f}" text-anchor="middle" font-size="13"'
            f' {_FONT} font-weight="600" fill="{_INK}" class="state">{escape(state)}</text>'
        )
    numbered = sorted(pairs, key=lambda p: (index[p[0]], index[p[1]]))
    number = {pair: n for n, pair in enumerate(numbered, 1)}
    marker = "arrow-" + "".join(c if c.isalnum() else "-" for c in title.lower())

    def badge(x: float, y: float, n: int) -> str:
        return (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="9" fill="#fff" stroke="{_ACCENT}"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" font-size="10" {_FONT}'
            f' fill="{_ACCENT}" class="edge-number">{n}</text>'
        )

    right = box_x + box_width
    for lane_no, pair in enumerate(sorted(forward, key=lambda p: index[p[1]] - index[p[0]])):
        y1, y2 = y_of(pair[0]) + box_height * 0.62, y_of(pair[1]) + box_height * 0.38
        bulge = right + 16 + lane_no * lane
        body.append(
            f'<path d="M{right:.1f},{y1:.1f} C{bulge:.1f},{y1:.1f} {bulge:.1f},{y2:.1f}'
            f' {right:.1f},{y2:.1f}" fill="none" stroke="{_INK}" stroke-width="1.2"'
            f' marker-end="url(#{marker})"/>'
        )
        # The curve's midpoint (t = 1/2 of the cubic) is a quarter of the way back from the bulge.
        body.append(badge(0.25 * right + 0.75 * bulge, (y1 + y2) / 2, number[pair]))
    for lane_no, pair in enumerate(sorted(backward, key=lambda p: index[p[0]] - index[p[1]])):
        y1, y2 = y_of(pair[0]) + box_height * 0.38, y_of(pair[1]) + box_height * 0.62
        bulge = box_x - 16 - lane_no * lane
        body.append(
            f'<path d="M{box_x:.1f},{y1:.1f} C{bulge:.1f},{y1:.1f} {bulge:.1f},{y2:.1f}'
            f' {box_x:.1f},{y2:.1f}" fill="none" stroke="{_INK}" stroke-width="1.2"'
            f' marker-end="url(#{marker})"/>'
        )
        body.append(badge(0.25 * box_x + 0.75 * bulge, (y1 + y2) / 2, number[pair]))
    for pair in pairs:
        if pair[0] != pair[1]:
            continue
        y = y_of(pair[0])
        x = box_x + box_width * 0.78
        body.append(
            f'<path d="M{x - 14:.1f},{y:.1f} C{x - 14:.1f},{y - 26:.1f} {x + 14:.1f},{y - 26:.1f}'
            f' {x + 14:.1f},{y:.1f}" fill="none" stroke="{_INK}" stroke-width="1.2"'
            f' marker-end="url(#{marker})"/>'
        )
        body.append(badge(x, y - 19.5, number[pair]))
    lanes_right = right + 16 + len(forward) * lane + 10
    legend_x = lanes_right + 10
    legend_width = 420.0
    y = top + 4
    for pair in numbered:
        lines = _wrap(f"{pair[0]} → {pair[1]}: {'; '.join(pairs[pair])}", legend_width - 30)
        body.append(badge(legend_x + 9, y + 5, number[pair]))
        for k, line in enumerate(lines):
            body.append(
                f'<text x="{legend_x + 26:.1f}" y="{y + 9 + 15 * k:.1f}" font-size="12" {_FONT}'
                f' fill="{_INK}" class="edge">{escape(line)}</text>'
            )
        y += 15 * len(lines) + 8
    height = max(top + len(states) * pitch, y) + 10
    width = legend_x + legend_width + margin
    return _svg(width, height, f"State machine: {title}", body, _arrowhead(marker))
