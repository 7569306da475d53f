"""The flows of spec/flows/ are checked against the spec, and drawn as SVG that parses."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from codegen.diagrams import frame_svg, sequence_svg
from codegen.flows import load_flows
from codegen.ir import Protocol
from codegen.loader import SpecError
from tests.conftest import ROOT

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def flows_root(tmp_path: Path) -> Path:
    """A copy of the flows folder to break, beside the real specs."""
    shutil.copytree(ROOT / "spec" / "flows", tmp_path / "spec" / "flows")
    return tmp_path


def _break(root: Path, protocol: str, old: str, new: str) -> None:
    path = root / "spec" / "flows" / f"{protocol}.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _problems(protocol: Protocol, root: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_flows(protocol, root)
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize(
    ("protocol_id", "old", "new", "expected"),
    [
        (
            "ovp",
            "{message: session.resume, from: client, to: gateway, fields: {seq: 3",
            "{message: session.resume, from: gateway, to: client, fields: {seq: 3",
            "session.resume is sent by client, not by the server",
        ),
        (
            "ovp",
            "{message: agent.handoff_requested,",
            "{message: agent.handoff_asked,",
            "no message type 'agent.handoff_asked' in the spec",
        ),
        ("ovp", "code: OVP_AUTH_FAILED", "code: OVP_AUTH_BAD", "no error code 'OVP_AUTH_BAD'"),
        ("ovp", "close: policy", "close: polite", "no close code 'polite' in the spec"),
        ("ovp", "{frame: AudioFrame,", "{frame: VideoFrame,", "no frame 'VideoFrame'"),
        (
            "brisvox",
            "{message: tool.result, from: agent, to: engine, fields: {id: 1",
            "{message: tool.result, from: agent, to: caller, fields: {id: 1",
            "'caller' is not a participant of this flow",
        ),
        ("brisvox", "sender: agent}", "sender: agnet}", "no sender 'agnet'"),
        # The values a step shows are the spec's: a tool call's id is an integer.
        (
            "brisvox",
            "{message: tool.call, from: engine, to: agent, fields: {id: 1,",
            '{message: tool.call, from: engine, to: agent, fields: {id: "t1",',
            "id=t1 is not a value of tool.call.id (wrong_type)",
        ),
        (
            "ovp",
            'fields: {seq: 15, reason: "caller_hangup"}',
            'fields: {seq: 15, raeson: "caller_hangup"}',
            "session.end has no field 'raeson'",
        ),
        (
            "ovp",
            "{frame: AudioFrame, from: client, to: gateway, fields: {direction: 0}",
            "{frame: AudioFrame, from: client, to: gateway, fields: {direction: 2}",
            "direction=2 is not a value of AudioFrame.direction: not one of [0, 1]",
        ),
        (
            "ovp",
            'aside: "live again"',
            'aside: "live again, seq=8"',
            "an aside shows no name=value: put it in fields, checked",
        ),
    ],
)
def test_a_flow_that_breaks_the_spec_is_refused_at_its_line(
    protocols: dict[str, Protocol],
    flows_root: Path,
    protocol_id: str,
    old: str,
    new: str,
    expected: str,
) -> None:
    _break(flows_root, protocol_id, old, new)
    lines = (flows_root / "spec" / "flows" / f"{protocol_id}.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if new.split(",")[0] in text)
    problems = _problems(protocols[protocol_id], flows_root)
    assert any(expected in p for p in problems), problems
    assert any(p.startswith(f"spec/flows/{protocol_id}.yaml:{line}:") for p in problems), problems


def test_an_unknown_key_in_a_step_is_refused(
    protocols: dict[str, Protocol], flows_root: Path
) -> None:
    _break(flows_root, "ovp", "{drop: [client, gateway]}", "{drop: [client, gateway], colour: red}")
    assert any("unknown key 'colour'" in p for p in _problems(protocols["ovp"], flows_root))


def test_every_flow_draws_as_svg_with_a_lifeline_per_participant(
    protocols: dict[str, Protocol],
) -> None:
    drawn = 0
    for protocol in protocols.values():
        flows = load_flows(protocol, ROOT)
        assert flows is not None
        for flow in flows.flows:
            svg = ET.fromstring(sequence_svg(flow))
            names = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "participant"]
            assert names == [label for _, label in flow.participants]
            assert len(svg.findall(f"{SVG}title")) == 1
            drawn += 1
    assert drawn >= 10


def test_the_frame_picture_names_every_field_and_flag(protocols: dict[str, Protocol]) -> None:
    frame = protocols["ovp"].frames[0]
    svg = ET.fromstring(frame_svg(frame))
    texts = {(t.get("class"), t.text) for t in svg.iter(f"{SVG}text")}
    assert {("field", f.name) for f in frame.fields} <= texts
    assert {("offset", str(f.offset)) for f in frame.fields} <= texts
    flags = "".join(t.text or "" for t in svg.iter(f"{SVG}text") if t.get("class") == "flag")
    assert all(name in flags for f in frame.fields for _, name, _ in f.flags)


def test_a_state_machine_numbers_each_pair_of_states_once() -> None:
    from codegen.diagrams import Edge, state_svg

    svg = ET.fromstring(
        state_svg(
            "door",
            ["shut", "open", "gone"],
            [
                Edge("shut", "open", ("push",)),
                Edge("shut", "open", ("pull",)),
                Edge("open", "shut", ("wind",)),
                Edge("open", "open", ("wedge",)),
                Edge("open", "gone", ("unhinge",)),
            ],
        )
    )
    texts = [(t.get("class"), "".join(t.itertext())) for t in svg.iter(f"{SVG}text")]
    assert [t for c, t in texts if c == "state"] == ["shut", "open", "gone"]
    legend = [t for c, t in texts if c == "edge"]
    assert legend == [
        "shut → open: push; pull",
        "open → shut: wind",
        "open → open: wedge",
        "open → gone: unhinge",
    ]
    assert len(svg.findall(f".//{SVG}path")) == 5  # four arcs and the marker's head
