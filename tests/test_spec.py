"""The two specs: complete against the documents, and every example valid."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from codegen.ir import Protocol
from codegen.pipeline import load_protocols
from tests.conftest import read_document
from voxwire import brisvox, ovp
from voxwire.conformance import json_equal

CODECS: dict[str, Any] = {"brisvox": brisvox, "ovp": ovp}

# The OVP document's event tables, direction by direction (S→C, C→S, ↔).
OVP_SERVER_ONLY = {
    "session.start", "session.end", "audio.ingress", "audio.egress", "audio.flush",
    "transcript.partial", "transcript.final", "agent.thinking", "agent.output",
    "agent.tool.invoke", "agent.tool.streaming", "agent.tool.result", "agent.tool.error",
    "agent.barge_in", "image.send", "file.attach", "call.quality.update",
    "agent.latency.breakdown", "agent.cost.tick", "agent.handoff_requested", "dtmf.received",
    "error",
}  # fmt: skip
OVP_CLIENT_ONLY = {
    "session.update", "session.resume", "agent.input", "agent.cancel", "supervisor.takeover",
    "supervisor.release", "agent.handoff_accepted", "agent.handoff_failed", "dtmf.send",
}  # fmt: skip
OVP_BOTH = {"screen.share", "agent.handoff_completed"}

BRISVOX_SERVER = {
    "session.start", "session.end", "session.usage", "turn.user_started", "turn.user_ended",
    "turn.bot_started", "turn.bot_ended", "turn.interrupted", "turn.metrics", "user.transcript",
    "user.text", "bot.llm_started", "bot.text", "bot.llm_stopped", "bot.tts_text",
    "bot.tts_stopped", "error", "events.lost", "tool.call", "tool.cancel", "command.result",
}  # fmt: skip
BRISVOX_AGENT = {
    "session.accept", "session.reject", "say", "end", "transfer", "context.update", "tools.set",
    "tool.result",
}  # fmt: skip


def _by_sender(protocol: Protocol) -> dict[str, set[str]]:
    return {s.id: {m.type for m in s.messages} for s in protocol.senders}


def test_brisvox_has_every_message_of_the_document(protocols: dict[str, Protocol]) -> None:
    senders = _by_sender(protocols["brisvox"])
    assert senders == {"server": BRISVOX_SERVER, "agent": BRISVOX_AGENT}
    assert (len(senders["server"]), len(senders["agent"])) == (21, 8)


def test_ovp_has_all_33_events_with_their_directions(protocols: dict[str, Protocol]) -> None:
    senders = _by_sender(protocols["ovp"])
    assert senders["server"] == OVP_SERVER_ONLY | OVP_BOTH
    assert senders["client"] == OVP_CLIENT_ONLY | OVP_BOTH
    assert len({m.type for m in protocols["ovp"].messages}) == 33


def test_error_codes_match_the_documents(protocols: dict[str, Protocol]) -> None:
    assert len(protocols["brisvox"].errors) == 13
    ovp_codes = {e.code for e in protocols["ovp"].errors}
    document = read_document("orbit-voice-protocol-1.0.txt")
    table = document[document.index("## Error codes") : document.index("## Compared to")]
    assert ovp_codes == set(re.findall(r"`(OVP_[A-Z_]+)`", table))
    assert len(ovp_codes) == 17


def _examples(protocol: Protocol) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (m.type, sender, example.json)
        for m in protocol.messages
        for example in m.examples
        for sender in m.senders
    ]


PROTOCOLS = {p.id: p for p in load_protocols()}
ALL_EXAMPLES = [
    pytest.param(pid, mtype, sender, data, id=f"{pid}:{mtype}:{sender}:{i}")
    for pid, protocol in PROTOCOLS.items()
    for i, (mtype, sender, data) in enumerate(_examples(protocol))
]


@pytest.mark.parametrize(("pid", "mtype", "sender", "data"), ALL_EXAMPLES)
def test_every_example_decodes_and_round_trips(
    pid: str, mtype: str, sender: str, data: dict[str, Any]
) -> None:
    codec = CODECS[pid]
    raw = json.dumps(data, ensure_ascii=False).encode()
    message = codec.decode(raw, sender=sender)
    assert message.type == mtype
    encoded = codec.encode(message)
    assert codec.decode(encoded, sender=sender) == message
    # The canonical encoding invents and changes nothing: it may only leave defaults out.
    assert _within(json.loads(encoded), data)


def _within(canonical: Any, original: Any) -> bool:
    """Every key of ``canonical`` is in ``original`` with the same value, at every depth."""
    if isinstance(canonical, dict):
        return isinstance(original, dict) and all(
            key in original and _within(value, original[key]) for key, value in canonical.items()
        )
    if isinstance(canonical, list):
        return (
            isinstance(original, list)
            and len(canonical) == len(original)
            and all(_within(c, o) for c, o in zip(canonical, original, strict=True))
        )
    if isinstance(canonical, str) and isinstance(original, str):
        return json_equal(canonical, original)  # date-times compare by instant
    if isinstance(canonical, bool) or isinstance(original, bool):
        return canonical is original
    # A number field reads the integer 310 as 310.0: the same JSON number.
    return bool(canonical == original)


def _document_example_types(name: str) -> list[str]:
    text = read_document(name)
    if name.startswith("orbit"):
        blocks = re.findall(r"```json[^\n]*\n(.*?)```", text, re.S)
    else:
        blocks = re.findall(r"^\{.*?\}\s*$\n(?=\s*$|\S)", text, re.S | re.M)
    return [re.search(r'"type":\s*"([^"]+)"', block).group(1) for block in blocks]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pid", "document"),
    [("brisvox", "brisvox-agent-protocol-v1.txt"), ("ovp", "orbit-voice-protocol-1.0.txt")],
)
def test_every_document_example_is_a_spec_example(
    protocols: dict[str, Protocol], pid: str, document: str
) -> None:
    printed = _document_example_types(document)
    assert printed, "no JSON example found in the document"
    cited: dict[str, int] = {}
    for m in protocols[pid].messages:
        cited[m.type] = sum(1 for e in m.examples if e.source and document in e.source)
    for mtype in set(printed):
        assert cited.get(mtype, 0) >= printed.count(mtype), f"{mtype}: document example missing"


def test_every_message_has_an_example_and_a_summary(protocols: dict[str, Protocol]) -> None:
    for protocol in protocols.values():
        for m in protocol.messages:
            assert m.examples and m.summary, m.type


def test_decisions_are_recorded_with_their_sentence(protocols: dict[str, Protocol]) -> None:
    for protocol in protocols.values():
        ids = [d.id for d in protocol.decisions]
        assert len(ids) == len(set(ids))
        assert len(ids) >= 20
        for d in protocol.decisions:
            assert d.quote and d.source and d.decision
