"""Spec changes as a maintainer makes them: each generates, or is refused by the spec check with
``FILE:LINE: path: problem``; ``breaking`` reports what each breaks (docs/evolution.md lists them).

Each change is a text edit of a scratch copy of spec/ (the YAML and the flows). Every change is
loaded, checked and compared with today's spec on its own; the changes that generate are then made
together in one copy, which is generated once and checked against itself (one generate keeps the
test fast: the renderers meet every change at once).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen.breaking import compare, report
from codegen.breaking.findings import Finding
from codegen.ir import Protocol
from codegen.loader import SpecError
from codegen.pipeline import check, generate, load_protocols
from codegen.sessions import build_sessions
from tests.conftest import ROOT

Texts = dict[str, str]
"""The spec folder's YAML files by path (``spec/ovp.yaml``, ``spec/flows/ovp.yaml``)."""
Edit = Callable[[Texts], None]

OVP, FLOWS = "spec/ovp.yaml", "spec/flows/ovp.yaml"
RELEASE = ROOT / "spec" / "releases" / "0.1.0"


def replace(path: str, old: str, new: str) -> Edit:
    """Replace the one occurrence of ``old`` in ``path`` (a stale anchor fails loudly)."""

    def edit(texts: Texts) -> None:
        assert texts[path].count(old) == 1, f"{old!r} occurs {texts[path].count(old)} times"
        texts[path] = texts[path].replace(old, new)

    return edit


def everywhere(old: str, new: str, only: str | None = None) -> Edit:
    """``sed s/old/new/g`` over every spec and flows file (or ``only`` one), as a maintainer
    renames."""

    def edit(texts: Texts) -> None:
        pattern = re.compile(re.escape(old) + r"(?![\w.])")
        paths = [only] if only else list(texts)
        assert any(pattern.search(texts[p]) for p in paths), old
        for path in paths:
            texts[path] = pattern.sub(new, texts[path])

    return edit


def drop_message(kind: str) -> Edit:
    """Remove a message's whole entry (up to the next one)."""

    def edit(texts: Texts) -> None:
        text = texts[OVP]
        start = text.index(f"  - type: {kind}\n")
        end = text.index("\n  - type: ", start + 1) + 1
        texts[OVP] = text[:start] + text[end:]

    return edit


NEW_MESSAGE = """\
  - type: dtmf.stop
    senders: [client]
    group: DTMF
    summary: Stop the DTMF keys still being played.
    examples:
      - description: Stop.
        json: {type: dtmf.stop, seq: 6, ts: "2026-05-14T15:02:41.000Z", session_id: ovps_01HZK7F2G5H8J1K4M7N0P3Q6R9}

"""

CONTROL_FRAME = """\
  - name: ControlFrame
    description: A small control frame.
    byte_order: big
    size: 4
    error: OVP_AUDIO_FRAME_INVALID
    fields:  # ControlFrame
      - {name: kind, type: u8, description: The kind.}
      - {name: body, type: bytes, size: 3, description: The body.}
    examples:
      - {description: A frame., header: {kind: 1}, fill: "00"}
"""

DTMF_DURATION = "{name: duration_ms, type: integer, minimum: dtmf_min_duration_ms, "
DTMF_SEND_EXAMPLE = 'digits: "2", duration_ms: 250}'
FRAME_SEQ = "      - name: frame_seq\n        type: u32\n"


@dataclass(frozen=True)
class Change:
    id: str
    edits: tuple[Edit, ...]
    findings: tuple[tuple[str, str | None], ...] = ()
    """What ``breaking`` against today's spec reports, in order: (rule, message or item)."""
    refused: tuple[str, str, str] | None = None
    """(file, text on the line, ``path: problem``) of the spec check's refusal."""
    against_release: tuple[str, ...] = ()
    """Rules ``breaking --against spec/releases/0.1.0`` reports that no decision accepts."""


NOT_BUMPED = ("PROTOCOL_VERSION_NOT_BUMPED", None)

CHANGES = [
    Change(
        "rename-message",
        (everywhere("dtmf.send", "dtmf.press"),),
        (("MESSAGE_RENAMED", "dtmf.send"), NOT_BUMPED),
    ),
    Change(
        "rename-message-with-a-session-role",
        (everywhere("agent.input", "agent.inject"),),
        (("MESSAGE_RENAMED", "agent.input"), NOT_BUMPED),
    ),
    Change(
        "add-message",
        (
            replace(
                OVP,
                "  # ------------------------------------------------------------------ Error\n",
                NEW_MESSAGE
                + "  # ------------------------------------------------------------------ Error\n",
            ),
        ),
        (("MESSAGE_ADDED", "dtmf.stop"), NOT_BUMPED),
    ),
    Change(
        "remove-message",
        (drop_message("supervisor.release"),),
        (("MESSAGE_REMOVED", "supervisor.release"), NOT_BUMPED),
    ),
    Change(
        "add-optional-field",
        (
            replace(
                OVP,
                "      - {name: digits, type: string, min_length: 1, max_length: max_dtmf_digits, "
                "pattern: '^[0-9*#A-D]+$', description: \"The keys to send, in order.\"}\n",
                "      - {name: digits, type: string, min_length: 1, max_length: max_dtmf_digits, "
                "pattern: '^[0-9*#A-D]+$', description: \"The keys to send, in order.\"}\n"
                "      - {name: volume_db, type: integer, required: false, minimum: -30, "
                'maximum: 0, description: "Tone level."}\n',
            ),
        ),
    ),
    Change(
        "add-required-field",
        (
            replace(
                OVP,
                '"How long the tone lasted, when known."}\n',
                '"How long the tone lasted, when known."}\n'
                '      - {name: tone_source, type: string, description: "How the key was heard."}\n',
            ),
            replace(
                OVP,
                'digits: "1", duration_ms: 120}',
                'digits: "1", duration_ms: 120, tone_source: inband}',
            ),
            replace(OVP, 'digits: "#"}', 'digits: "#", tone_source: rfc4733}'),
        ),
        (("FIELD_ADDED_REQUIRED", "dtmf.received"), NOT_BUMPED),
    ),
    Change(
        "rename-field",
        (everywhere("queue_wait_ms", "queue_time_ms"),),
        (("FIELD_RENAMED", "agent.handoff_accepted"), NOT_BUMPED),
    ),
    Change(
        "change-field-type",
        (
            replace(
                OVP,
                "{name: played_ms, type: integer,",
                "{name: played_ms, type: number,",
            ),
        ),
        (("FIELD_TYPE_CHANGED", "agent.barge_in"), NOT_BUMPED),
    ),
    Change(
        "add-sender",
        (
            replace(
                OVP,
                "  - type: dtmf.received\n    senders: [server]\n",
                "  - type: dtmf.received\n    senders: [server, client]\n",
            ),
        ),
        (("MESSAGE_SENDER_ADDED", "dtmf.received"), NOT_BUMPED),
    ),
    Change(
        "remove-field",
        (
            replace(
                OVP,
                f"      - {DTMF_DURATION}maximum: dtmf_max_duration_ms, default: 100, "
                'description: "Tone length of each key; dtmf_default_duration_ms (100) when '
                'absent."}\n    examples:\n      - description: Enter',
                "    examples:\n      - description: Enter",
            ),
            replace(OVP, DTMF_SEND_EXAMPLE, 'digits: "2"}'),
        ),
        (("FIELD_REMOVED", "dtmf.send"), NOT_BUMPED),
    ),
    Change(
        "tighten-limit",
        (
            replace(
                OVP,
                "  - name: max_dtmf_digits\n    value: 32\n",
                "  - name: max_dtmf_digits\n    value: 16\n",
            ),
        ),
        (
            ("FIELD_LIMIT_TIGHTENED", "dtmf.received"),
            ("FIELD_LIMIT_TIGHTENED", "dtmf.send"),
            ("CONSTANT_CHANGED", "max_dtmf_digits"),
            NOT_BUMPED,
        ),
    ),
    Change(
        "loosen-limit",
        (
            replace(
                OVP,
                "  - name: dtmf_max_duration_ms\n    value: 2000\n",
                "  - name: dtmf_max_duration_ms\n    value: 5000\n",
            ),
        ),
        (
            ("FIELD_LIMIT_LOOSENED", "dtmf.send"),
            ("TIMING_CHANGED", "dtmf_max_duration_ms"),
            NOT_BUMPED,
        ),
    ),
    Change(
        "add-enum-value",
        (
            replace(
                OVP,
                '      - {value: hangup, description: "The call is hung up; session.end follows."}\n',
                '      - {value: hangup, description: "The call is hung up; session.end follows."}\n'
                '      - {value: callback, description: "The caller is called back later."}\n',
            ),
        ),
        (("ENUM_VALUE_ADDED", "agent.handoff_failed"), NOT_BUMPED),
    ),
    Change(
        "remove-enum-value",
        (
            replace(
                OVP,
                '      - {value: session_end, description: "The session is ending; session.end follows."}\n',
                "",
            ),
        ),
        (("ENUM_VALUE_REMOVED", "audio.flush"), NOT_BUMPED),
    ),
    Change(
        "change-default",
        (
            replace(
                OVP,
                "{name: resumable, type: boolean, default: false,",
                "{name: resumable, type: boolean, default: true,",
            ),
        ),
        (("FIELD_DEFAULT_CHANGED", "supervisor.takeover"), NOT_BUMPED),
    ),
    Change(
        "required-field-made-optional",
        (
            replace(
                OVP,
                '      - {name: operator_user_id, type: string, min_length: 1, max_length: max_id_chars, description: "The operator who accepted."}',
                '      - {name: operator_user_id, type: string, required: false, min_length: 1, max_length: max_id_chars, description: "The operator who accepted."}',
            ),
        ),
        (("FIELD_REQUIRED_REMOVED", "agent.handoff_accepted"), NOT_BUMPED),
    ),
    Change(
        "frame-field-widened",
        (
            replace(
                OVP,
                "      - name: direction\n        type: u16\n",
                "      - name: direction\n        type: u32\n",
            ),
            replace(
                OVP,
                "    byte_order: little\n    size: 652\n",
                "    byte_order: little\n    size: 654\n",
            ),
        ),
        (
            ("FRAME_SIZE_CHANGED", "AudioFrame"),
            ("FRAME_LAYOUT_CHANGED", "AudioFrame"),
            ("FRAME_LAYOUT_CHANGED", "AudioFrame"),
            ("FRAME_LAYOUT_CHANGED", "AudioFrame"),
            ("FRAME_LAYOUT_CHANGED", "AudioFrame"),
            NOT_BUMPED,
        ),
    ),
    Change(
        "frame-flag-added",
        (
            replace(
                OVP,
                "          - {bit: 2, name: last_of_utterance,",
                '          - {bit: 3, name: comfort_noise, description: "Generated noise."}\n'
                "          - {bit: 2, name: last_of_utterance,",
            ),
        ),
        (("FRAME_FLAGS_CHANGED", "AudioFrame"), NOT_BUMPED),
    ),
    Change(
        "close-code-changed",
        (replace(OVP, "  - name: policy\n    code: 1008\n", "  - name: policy\n    code: 4008\n"),),
        (("CLOSE_CODE_CHANGED", "policy"), NOT_BUMPED),
        against_release=("CLOSE_CODE_CHANGED", "PROTOCOL_VERSION_NOT_BUMPED"),
    ),
    Change(
        "timing-changed",
        (
            replace(
                OVP,
                "  - name: resume_window_ms\n    value: 30000\n",
                "  - name: resume_window_ms\n    value: 60000\n",
            ),
        ),
        (("TIMING_CHANGED", "resume_window_ms"), NOT_BUMPED),
    ),
    Change(
        "u64-frame-field",
        (
            replace(OVP, FRAME_SEQ, "      - name: frame_seq\n        type: u64\n"),
            replace(
                OVP,
                "    byte_order: little\n    size: 652\n",
                "    byte_order: little\n    size: 656\n",
            ),
        ),
        refused=(
            OVP,
            "        type: u64",
            "frames[0].fields[3].type: a u64 header field is not supported: the TypeScript "
            "binding reads header fields as numbers, exact only to 2^53; split it into two u32 "
            "fields",
        ),
    ),
    Change(
        "add-frame-without-a-direction",
        (replace(OVP, "\nsessions:\n", "\n" + CONTROL_FRAME + "\nsessions:\n"),),
        refused=(
            OVP,
            "    fields:  # ControlFrame",
            "frames[1].fields: no header field has an enum: the decoders check one (the "
            "direction) against the sender",
        ),
    ),
    Change(
        "rename-direction-values",
        (everywhere("client_to_server", "uplink"), everywhere("server_to_client", "downlink")),
        refused=(
            OVP,
            "        enum: FrameDirection",
            "frames[0].fields[2].enum: the values of FrameDirection name the sender of each "
            "direction (server_to_..., client_to_...): none names client, server",
        ),
    ),
    Change(
        "limit-below-an-example",
        (
            replace(
                OVP,
                "  - name: max_dtmf_digits\n    value: 32\n",
                "  - name: max_dtmf_digits\n    value: 4\n",
            ),
        ),
        refused=(
            OVP,
            'json: {type: dtmf.send, seq: 4, ts: "2026-05-14T15:02:31.500Z"',
            "messages[31].examples[0].json.digits: example breaks dtmf.send: '4021#' is too long",
        ),
    ),
    Change(
        "remove-the-event-role",
        (
            replace(
                OVP, "  - type: agent.thinking\n    session: event\n", "  - type: agent.thinking\n"
            ),
        ),
        refused=(
            OVP,
            "  - id: server",
            "senders[0].id: server sends no message with session role 'event': the session "
            "vectors play one between the others",
        ),
    ),
    Change(
        "rename-a-decision-the-session-vectors-cite",
        (everywhere("seq-gaps-allowed", "seq-gaps-fine", only=OVP),),
        refused=(
            OVP,
            "# yaml-language-server: $schema=spec-format.schema.json",  # line 1: the item is gone
            "decisions: the session vectors (codegen/sessions.py) need decisions "
            "'seq-gaps-allowed'",
        ),
    ),
    Change(
        "rename-field-the-flows-show",
        (everywhere("last_server_seq", "last_seen_seq", only=OVP),),
        refused=(
            FLOWS,
            "{message: session.resume, from: client, to: gateway, fields: {seq: 3, last_server_seq: 5}}",
            "flows[3].steps[5].fields: session.resume has no field 'last_server_seq' "
            "(known: seq, ts, session_id, last_seen_seq)",
        ),
    ),
]


def _texts() -> Texts:
    paths = [
        *sorted((ROOT / "spec").glob("*.yaml")),
        *sorted((ROOT / "spec" / "flows").glob("*.yaml")),
    ]
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def _write(texts: Texts, root: Path) -> Path:
    for path, text in texts.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def _changed(change: Change) -> Texts:
    texts = _texts()
    for edit in change.edits:
        edit(texts)
    return texts


def _subject(f: Finding) -> str | None:
    return f.message or f.field


@pytest.mark.parametrize("change", CHANGES, ids=[c.id for c in CHANGES])
def test_a_change_loads_or_is_refused_at_its_line(
    change: Change, protocols: dict[str, Protocol], tmp_path: Path
) -> None:
    texts = _changed(change)
    root = _write(texts, tmp_path)
    if change.refused is not None:
        path, marker, problem = change.refused
        with pytest.raises(SpecError) as caught:
            load_protocols(root)
        lines = texts[path].splitlines()
        line = next(i for i, text in enumerate(lines, 1) if marker in text)
        shown = [str(p) for p in caught.value.problems]
        assert all(re.match(r"^spec/[\w/]+\.yaml:\d+: ", p) for p in shown), shown
        assert any(p.startswith(f"{path}:{line}: {problem}") for p in shown), shown
        return
    found = [f for p in load_protocols(root) for f in compare(protocols[p.id], p)]
    assert [(f.rule, _subject(f)) for f in found] == list(change.findings)
    assert all(f.accepted_by is None for f in found)
    if change.against_release:  # breaking --against spec/releases/0.1.0
        failing = report(str(RELEASE), root).failing
        assert [f.rule for f in failing] == list(change.against_release)


def test_the_changes_that_load_generate_together(tmp_path: Path) -> None:
    texts = _texts()
    for change in CHANGES:
        if change.refused is None:
            for edit in change.edits:
                edit(texts)
    root = _write(texts, tmp_path)
    written = generate(root)
    assert "generated/voxwire/ovp/messages.py" in written
    assert check(root) == []
    for path in (root / "generated" / "voxwire").rglob("*.py"):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    messages = (root / "generated" / "voxwire" / "ovp" / "messages.py").read_text()
    assert '"dtmf.press"' in messages and '"dtmf.send"' not in messages
    sessions = (root / "generated" / "voxwire" / "ovp" / "sessions.jsonl").read_text()
    assert "agent.inject" in sessions and "agent.input" not in sessions


def test_a_session_case_whose_role_is_gone_is_left_out(
    protocols: dict[str, Protocol], tmp_path: Path
) -> None:
    """The cases that send a message whose session role is gone are left out, the others stay,
    and the spec check names each transition only the cases left out covered."""
    ovp = protocols["ovp"]
    cases = build_sessions(ovp)
    resumes = [c for c in cases if any('"session.resume"' in s.get("text", "") for s in c["steps"])]
    kept = {claim for c in cases if c not in resumes for claim in c["covers"]}
    bare = {
        f"sessions[{n}].transitions.{t.source}.{t.input}"
        for n, m in enumerate(ovp.machines)
        for t in m.transitions
        if f"{m.role} {t.source}.{t.input}" not in kept
    }
    assert {
        "sessions[1].transitions.dropped.resume",
        "sessions[0].transitions.dropped.connect",
    } <= bare
    texts = _texts()
    replace(OVP, "  - type: session.resume\n    session: resume\n", "  - type: session.resume\n")(
        texts
    )
    with pytest.raises(SpecError) as caught:
        load_protocols(_write(texts, tmp_path))
    problems = caught.value.problems
    assert {p.path for p in problems} == bare
    lines = texts[OVP].splitlines()
    for p in problems:  # each at its transition's line
        assert p.message == "no session case covers this transition (codegen/sessions.py)"
        assert lines[p.line - 1].strip().startswith(p.path.rsplit(".", 1)[1] + ":"), p


def test_every_change_is_documented() -> None:
    page = (ROOT / "docs" / "evolution.md").read_text(encoding="utf-8")
    kinds = {c.id for c in CHANGES}
    assert len(kinds) >= 15
    assert [k for k in sorted(kinds) if f"`{k}`" not in page] == []
