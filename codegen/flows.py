"""The flows of a protocol: message sequences, loaded and checked against the resolved spec.

The flows (``spec/flows/<protocol>.yaml``, in the format of
``spec/flows/flows-format.schema.json``) are checked against the resolved spec: every message a
step names must exist and be sent by that step's sender, every frame, error code and close code
must be the spec's, every field value a step shows must be one its message or frame allows
(:mod:`codegen.flow_fields`). So a diagram (:mod:`codegen.diagrams`) cannot drift from the spec:
change a message's senders, and the flow that shows it stops generating.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegen.flow_fields import ASIDE_WITH_VALUES, field_problems, frame_field_problems, shown
from codegen.ir import Protocol
from codegen.loader import Problem, RawSpec, SpecError, load

__all__ = ["FLOWS_DIR", "FLOWS_SCHEMA", "Flow", "Flows", "Step", "load_flows"]

FLOWS_DIR = Path(__file__).resolve().parent.parent / "spec" / "flows"
FLOWS_SCHEMA = FLOWS_DIR / "flows-format.schema.json"


@dataclass(frozen=True)
class Step:
    """One step of a flow: a message, a frame, an HTTP line, a close, a drop or a note."""

    kind: str
    """``message``, ``frame``, ``http``, ``close``, ``drop`` or ``note``."""
    label: str
    """What the arrow or the note says (a message type, an HTTP line, ``close 1000 (...)``)."""
    detail: str
    source: str | None
    """The sender (participant id) of an arrow; None for a note or a drop."""
    target: str | None
    over: tuple[str, ...]
    """The participants a note or a drop spans."""


@dataclass(frozen=True)
class Flow:
    id: str
    title: str
    description: str
    source: str | None
    participants: tuple[tuple[str, str], ...]
    """``(id, label)`` in the order they stand, left to right."""
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Flows:
    protocol: str
    spec_file: str
    sha256: str
    flows: tuple[Flow, ...]


def load_flows(protocol: Protocol, root: Path) -> Flows | None:
    """The flows of ``protocol``, checked against it; None when the protocol has none.

    Raises :class:`~codegen.loader.SpecError` with every problem, each at its file and line.
    """
    path = root / "spec" / "flows" / f"{protocol.id}.yaml"
    if not path.is_file():
        return None
    raw = load(path, str(path.relative_to(root)), schema=FLOWS_SCHEMA)
    problems: list[Problem] = []
    flows = _Checker(protocol, raw, problems).flows()
    if problems:
        raise SpecError(problems)
    return Flows(protocol.id, raw.display, raw.sha256, flows)


class _Checker:
    def __init__(self, protocol: Protocol, raw: RawSpec, problems: list[Problem]) -> None:
        self.p = protocol
        self.raw = raw
        self.problems = problems
        self.messages = {m.type: m for m in protocol.messages}
        self.senders = {s.id for s in protocol.senders}
        self.participants: dict[str, dict[str, Any]] = raw.data["participants"]

    def fail(self, path: tuple[str | int, ...], message: str) -> None:
        self.problems.append(self.raw.problem(path, message))

    def flows(self) -> tuple[Flow, ...]:
        data = self.raw.data
        if data["protocol"] != self.p.id:
            self.fail(("protocol",), f"names {data['protocol']!r}, but this is {self.p.id}'s file")
        for pid, participant in self.participants.items():
            sender = participant.get("sender")
            if sender is not None and sender not in self.senders:
                known = ", ".join(sorted(self.senders))
                self.fail(("participants", pid, "sender"), f"no sender {sender!r} (known: {known})")
        seen: set[str] = set()
        flows = []
        for i, flow in enumerate(data["flows"]):
            if flow["id"] in seen:
                self.fail(("flows", i, "id"), f"flow id {flow['id']!r} is used twice")
            seen.add(flow["id"])
            flows.append(self.flow(flow, ("flows", i)))
        return tuple(flows)

    def flow(self, flow: dict[str, Any], at: tuple[str | int, ...]) -> Flow:
        members = list(flow["participants"])
        for j, pid in enumerate(members):
            if pid not in self.participants:
                self.fail((*at, "participants", j), f"no participant {pid!r}")
        steps = tuple(
            self.step(step, set(members), (*at, "steps", k)) for k, step in enumerate(flow["steps"])
        )
        labels = tuple(
            (pid, str(self.participants.get(pid, {}).get("label", pid))) for pid in members
        )
        return Flow(
            flow["id"], flow["title"], flow["description"], flow.get("source"), labels, steps
        )

    def step(self, step: dict[str, Any], members: set[str], at: tuple[str | int, ...]) -> Step:
        source, target = step.get("from"), step.get("to")
        for key in ("from", "to"):
            if key in step and step[key] not in members:
                self.fail((*at, key), f"{step[key]!r} is not a participant of this flow")
        over = tuple(step.get("over", step.get("drop", ())))
        for j, pid in enumerate(over):
            if pid not in members:
                self.fail(
                    (*at, "over" if "over" in step else "drop", j),
                    f"{pid!r} is not a participant of this flow",
                )
        fields: dict[str, Any] = step.get("fields", {})
        detail = " ".join(
            [
                *([f"code={step['code']}"] if "code" in step else []),
                *(f"{name}={shown(value)}" for name, value in fields.items()),
                *([step["aside"]] if "aside" in step else []),
            ]
        )
        if ASIDE_WITH_VALUES.search(step.get("aside", "")):
            self.fail((*at, "aside"), "an aside shows no name=value: put it in fields, checked")
        if "message" in step:
            label = self.message(step, at)
            message = self.messages.get(step["message"])
            if message is not None:
                for problem in field_problems(self.p, message, fields):
                    self.fail((*at, "fields"), problem)
            return Step("message", label, detail, source, target, ())
        if "code" in step:
            self.fail((*at, "code"), "only a message step carries an error code")
        if "frame" in step:
            frames = {fr.name: fr for fr in self.p.frames}
            frame = frames.get(step["frame"])
            if frame is None:
                known = ", ".join(frames) or "none"
                self.fail(
                    (*at, "frame"), f"no frame {step['frame']!r} in the spec (known: {known})"
                )
            else:
                for problem in frame_field_problems(frame, fields):
                    self.fail((*at, "fields"), problem)
            return Step("frame", f"{step['frame']} (binary)", detail, source, target, ())
        if fields:
            self.fail((*at, "fields"), "only a message or frame step shows field values")
        if "http" in step:
            return Step("http", step["http"], detail, source, target, ())
        if "close" in step:
            return Step(
                "close", self.close(step["close"], (*at, "close")), detail, source, target, ()
            )
        if "drop" in step:
            return Step("drop", "the connection drops", detail, None, None, over)
        return Step("note", step["note"], detail, None, None, over)

    def message(self, step: dict[str, Any], at: tuple[str | int, ...]) -> str:
        kind = step["message"]
        message = self.messages.get(kind)
        if message is None:
            self.fail((*at, "message"), f"no message type {kind!r} in the spec")
            return str(kind)
        sender = self.participants.get(step["from"], {}).get("sender")
        if sender not in message.senders:
            who = f"the {sender}" if sender else f"{step['from']!r}, which is no sender,"
            self.fail(
                (*at, "message"),
                f"{kind} is sent by {' and '.join(message.senders)}, not by {who}",
            )
        code = step.get("code")
        if code is not None and code not in {e.code for e in self.p.errors}:
            self.fail((*at, "code"), f"no error code {code!r} in the spec")
        return str(kind)

    def close(self, close: str, at: tuple[str | int, ...]) -> str:
        codes = {c.name: c for c in self.p.close_codes}
        if close in codes:
            return f"close {codes[close].code} ({close})"
        known = ", ".join(codes) or "none"
        self.fail(at, f"no close code {close!r} in the spec (known: {known})")
        return f"close {close}"
