"""The spec's ``statistics:`` section: what it generates, and what its check refuses.

Each broken spec is a real spec with one small textual edit; the expected problem names the
file, the line (found from the text, never hard-coded) and the YAML path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codegen.ir import Protocol
from codegen.loader import SpecError, load
from codegen.resolver import resolve
from tests.conftest import ROOT
from voxwire.brisvox.statistics import STATISTICS as BRISVOX
from voxwire.observe.marks import Mark, When
from voxwire.ovp.statistics import STATISTICS as OVP


def _problems(tmp_path: Path, protocol: str, old: str, new: str) -> tuple[list[str], str]:
    text = (ROOT / "spec" / f"{protocol}.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    edited = text.replace(old, new)
    path = tmp_path / f"{protocol}.yaml"
    path.write_text(edited, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        resolve(load(path, f"spec/{protocol}.yaml"))
    return [str(p) for p in caught.value.problems], edited


def _line(text: str, marker: str) -> int:
    assert text.count(marker) == 1, marker
    return text[: text.index(marker)].count("\n") + 1


def test_the_generated_tables_say_what_the_specs_say(protocols: dict[str, Protocol]) -> None:
    assert BRISVOX.senders == ("server", "agent") and OVP.senders == ("server", "client")
    assert BRISVOX.sequenced == {"server"} and OVP.sequenced == {"server", "client"}
    assert BRISVOX.turn_end == (Mark("turn.user_ended"),)
    assert Mark("end", When("say", present=True)) in BRISVOX.turn_output
    assert OVP.turn_end == (Mark("transcript.final", When("speaker", equals="caller")),)
    assert BRISVOX.frames is None
    assert (
        OVP.frames is not None
        and OVP.frames.duration_ms
        == protocols["ovp"]
        .constants[[c.name for c in protocols["ovp"].constants].index("frame_ms")]
        .value
    )
    assert (OVP.frames.sequence_modulus, OVP.frames.clock_modulus) == (2**32, 2**32)
    assert [o.outcome for o in BRISVOX.tool_outcomes] == ["error", "ok", "cancelled"]
    assert OVP.resume is not None and OVP.resume.replayed_before == "ts"
    assert BRISVOX.loss_report is not None and OVP.loss_report is None
    for p in protocols.values():
        assert p.statistics is not None
        assert any(d.id == "turn-latency-marks" for d in p.decisions)


def test_the_reference_lists_the_statistics() -> None:
    page = (ROOT / "docs" / "reference" / "ovp.md").read_text(encoding="utf-8")
    section = page[page.index("## Statistics") : page.index("## Transport")]
    assert '[`transcript.final`](#transcript-final) with `speaker` = `"caller"`' in section
    assert "counter `frame_seq`, clock `rtp_timestamp`, silence flag `silence`, 20 ms" in section
    assert "(../observability.md)" in section


CASES = [
    (
        "brisvox",
        "  turn_end:\n    - type: turn.user_ended\n",
        "  turn_end:\n    - type: turn.user_endd\n",
        "    - type: turn.user_endd",
        "statistics.turn_end[0].type: no message 'turn.user_endd' in this spec",
    ),
    (
        "brisvox",
        "tool_call: {type: tool.call, key: id, name: name}",
        "tool_call: {type: tool.call, key: idd, name: name}",
        "tool_call: {type: tool.call, key: idd",
        "statistics.tool_call.key: tool.call has no field 'idd' (its fields: seq, t_ms, id,",
    ),
    (
        "ovp",
        "when: {field: speaker, equals: caller}",
        "when: {field: speaker, equals: callr}",
        "equals: callr}",
        "statistics.turn_end[0].when.equals: 'callr' is no value of Speaker (caller, agent, "
        "operator)",
    ),
    (
        "ovp",
        "outcome: error, duration_ms: duration_ms}",
        "outcome: error, duration_ms: message}",
        "duration_ms: message}",
        "statistics.tool_outcomes[1].duration_ms: 'message' is string, not a number",
    ),
    (
        "brisvox",
        "    - {type: tool.cancel, key: id, outcome: cancelled}",
        "    - {type: tool.cancel, key: reason, outcome: cancelled}",
        "key: reason, outcome: cancelled}",
        "statistics.tool_outcomes[2].key: 'reason' is enum; the call's key is integer",
    ),
    (
        "ovp",
        "    replayed_before: ts",
        "    replayed_before: last_server_seq",
        "replayed_before: last_server_seq",
        "statistics.resume.replayed_before: 'last_server_seq' is integer, not a datetime",
    ),
    (
        "ovp",
        "  sequence: seq\n  frames:",
        "  sequence: sequ\n  frames:",
        "sequence: sequ",
        "statistics.sequence: no sender's envelope has a field 'sequ'",
    ),
    (
        "ovp",
        "    silence: silence\n",
        "    silence: quiet\n",
        "silence: quiet",
        "statistics.frames.silence: 'quiet' is no flag of AudioFrame (its flags: silence, "
        "dtmf_overlay, last_of_utterance)",
    ),
    (
        "ovp",
        "    clock: rtp_timestamp\n",
        "    clock: direction\n",
        "clock: direction",
        "statistics.frames.clock: 'direction' is no counting header field of AudioFrame",
    ),
    (
        "ovp",
        "    duration_ms: frame_ms\n",
        "    duration_ms: frame_msec\n",
        "duration_ms: frame_msec",
        "statistics.frames.duration_ms: no integer constant 'frame_msec'",
    ),
    (
        "brisvox",
        "      when: {field: say, present: true}",
        "      when: {field: say, present: true, equals: x}",
        "present: true, equals: x}",
        "statistics.turn_output[3].when: {'field': 'say', 'present': True, 'equals': 'x'} has "
        "too many properties",
    ),
]


@pytest.mark.parametrize(("protocol", "old", "new", "marker", "expected"), CASES)
def test_a_broken_statistics_section_is_refused_at_its_line(
    tmp_path: Path, protocol: str, old: str, new: str, marker: str, expected: str
) -> None:
    found, edited = _problems(tmp_path, protocol, old, new)
    line = _line(edited, marker)
    assert [p for p in found if p.startswith(f"spec/{protocol}.yaml:{line}: {expected}")], found


def test_the_guide_names_the_messages_the_tables_read_and_no_other(
    protocols: dict[str, Protocol],
) -> None:
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    # The figures' definitions; the later sections (metrics, the periodic events) name other
    # messages for what they are, not for what the statistics read.
    guide = text.partition("## Live statistics in every role")[0]
    read: set[str] = set()
    for marks in (BRISVOX, OVP):
        read |= {m.type for m in (*marks.turn_end, *marks.turn_output)}
        read |= {o.type for o in marks.tool_outcomes}
        read.add(marks.tool_call.type)
        read |= {marks.resume.type} if marks.resume is not None else set()
        read |= {marks.loss_report.type} if marks.loss_report is not None else set()
    types = {m.type for p in protocols.values() for m in p.messages}
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+|say|end)`", guide)) & types
    assert read - named == set(), "read, not in docs/observability.md"
    assert named - read == set(), "named in docs/observability.md, not read"
