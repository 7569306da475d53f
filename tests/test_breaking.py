"""`python -m codegen breaking`: each way a spec can break finds its rule, side, message and field.

Every test mutates a copy of a real spec (spec/*.yaml) and compares the resolved versions; the
release test compares today's specs with the last released ones (spec/releases/).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from codegen.breaking import compare, report
from codegen.breaking.findings import RULES, Finding
from codegen.ir import Protocol
from codegen.loader import SpecError, load
from codegen.resolver import resolve
from tests.conftest import ROOT

Data = dict[str, Any]
Mutation = Callable[[Data], object]

RELEASES = ROOT / "spec" / "releases"


@cache
def _raw(protocol: str) -> Data:
    data = yaml.safe_load((ROOT / "spec" / f"{protocol}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@cache
def _spec(protocol: str) -> Protocol:
    return resolve(load(ROOT / "spec" / f"{protocol}.yaml"))


def _mutated(protocol: str, mutate: Mutation, tmp_path: Path) -> Protocol:
    data = copy.deepcopy(_raw(protocol))
    mutate(data)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{protocol}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return resolve(load(path))


def _message(data: Data, kind: str) -> Data:
    return next(m for m in data["messages"] if m["type"] == kind)


def _field(data: Data, kind: str, name: str) -> Data:
    return next(f for f in _message(data, kind)["fields"] if f["name"] == name)


def _item(data: Data, key: str, name: str) -> Data:
    return next(x for x in data[key] if x["name"] == name)


def _retype(message: Data, kind: str, name: str | None = None) -> Data:
    """``message`` under another type (and class name), its examples too."""
    message["type"] = kind
    if name is not None:
        message["name"] = name
    for example in message["examples"]:
        example["json"]["type"] = kind
    return message


def _copy_message(data: Data, source: str, kind: str, name: str) -> Data:
    """A new message: a copy of ``source`` under another type, without its decisions and its
    session role (each is unique in a spec)."""
    message = _retype(_undecided(copy.deepcopy(_message(data, source))), kind, name)
    message.pop("session", None)
    data["messages"].append(message)
    return message


def _undecided(item: Any) -> Any:
    """``item`` without the decisions anywhere in it (their ids are unique in a spec)."""
    if isinstance(item, dict):
        item.pop("decisions", None)
        for value in item.values():
            _undecided(value)
    elif isinstance(item, list):
        for value in item:
            _undecided(value)
    return item


def _unused_error_code(data: Data) -> str:
    text = json.dumps({k: v for k, v in data.items() if k != "errors"})
    return next(str(e["code"]) for e in data["errors"] if f'"{e["code"]}"' not in text)


def _drop(container: list[Data], name: str, key: str = "name") -> None:
    container[:] = [x for x in container if x[key] != name]


def _swap_frame_fields(data: Data) -> None:
    fields = data["frames"][0]["fields"]
    fields[2], fields[3] = fields[3], fields[2]  # direction (u16) and frame_seq (u32)
    for example in data["frames"][0]["examples"]:
        example["header"] = dict(example["header"])


def _bump_version(data: Data) -> None:
    data["protocol"]["version"] = "2.0"
    _item(data, "constants", "protocol_version")["value"] = "2.0"
    _field(data, "session.start", "protocol_version")["const"] = "2.0"


# (protocol, how, rule, side, message, field)
CASES: list[tuple[str, Mutation, str, str, str | None, str | None]] = [
    # message type removed
    (
        "ovp",
        lambda d: _drop(d["messages"], "agent.cancel", "type"),
        "MESSAGE_REMOVED",
        "old_senders",
        "agent.cancel",
        None,
    ),
    # renamed type, same fields
    (
        "ovp",
        lambda d: _retype(_message(d, "agent.cancel"), "agent.abort"),
        "MESSAGE_RENAMED",
        "both",
        "agent.cancel",
        None,
    ),
    # field removed: required, then optional
    (
        "ovp",
        lambda d: _drop(_message(d, "agent.input")["fields"], "text"),
        "FIELD_REMOVED",
        "old_receivers",
        "agent.input",
        "text",
    ),
    (
        "brisvox",
        lambda d: _drop(_message(d, "say")["fields"], "interrupt"),
        "FIELD_REMOVED",
        "old_senders",
        "say",
        "interrupt",
    ),
    # field renamed
    (
        "ovp",
        lambda d: _field(d, "agent.input", "text").update(name="content"),
        "FIELD_RENAMED",
        "both",
        "agent.input",
        "text",
    ),
    # a field inside a nested type, removed
    (
        "ovp",
        lambda d: _drop(_item(d, "types", "FinalStats")["fields"], "turns"),
        "FIELD_REMOVED",
        "old_receivers",
        "session.end",
        "stats.turns",
    ),
    # integer to number is safe for new receivers only; number to integer the other way
    (
        "ovp",
        lambda d: _field(d, "session.resume", "last_server_seq").update(type="number"),
        "FIELD_TYPE_CHANGED",
        "old_receivers",
        "session.resume",
        "last_server_seq",
    ),
    (
        "ovp",
        lambda d: _field(d, "call.quality.update", "rtt_ms").update(type="integer"),
        "FIELD_TYPE_CHANGED",
        "old_senders",
        "call.quality.update",
        "rtt_ms",
    ),
    (
        "ovp",
        lambda d: _field(d, "audio.ingress", "speech").update(type="string"),
        "FIELD_TYPE_CHANGED",
        "both",
        "audio.ingress",
        "speech",
    ),
    # scalar to array
    (
        "ovp",
        lambda d: _field(d, "agent.input", "text").update(type="array", items="string"),
        "FIELD_CARDINALITY_CHANGED",
        "both",
        "agent.input",
        "text",
    ),
    # required added, required removed
    (
        "ovp",
        lambda d: _field(d, "agent.cancel", "turn_id").update(required=True),
        "FIELD_REQUIRED_ADDED",
        "old_senders",
        "agent.cancel",
        "turn_id",
    ),
    (
        "ovp",
        lambda d: _field(d, "agent.input", "text").update(required=False),
        "FIELD_REQUIRED_REMOVED",
        "old_receivers",
        "agent.input",
        "text",
    ),
    # a new required field
    (
        "ovp",
        lambda d: _message(d, "agent.input")["fields"].append(
            {"name": "lang", "type": "string", "description": "x"}
        ),
        "FIELD_ADDED_REQUIRED",
        "old_senders",
        "agent.input",
        "lang",
    ),
    # nullable
    (
        "ovp",
        lambda d: _field(d, "agent.input", "text").update(nullable=True),
        "FIELD_NULLABLE_CHANGED",
        "old_receivers",
        "agent.input",
        "text",
    ),
    # default changed
    (
        "ovp",
        lambda d: _field(d, "dtmf.send", "duration_ms").update(default=200),
        "FIELD_DEFAULT_CHANGED",
        "both",
        "dtmf.send",
        "duration_ms",
    ),
    # enum value removed, renamed, added to a closed enum
    (
        "ovp",
        lambda d: _item(d, "enums", "InputSource")["values"].pop(),
        "ENUM_VALUE_REMOVED",
        "old_senders",
        "agent.input",
        "source",
    ),
    (
        "ovp",
        lambda d: _item(d, "enums", "InputSource")["values"][0].update(value="spoken"),
        "ENUM_VALUE_RENAMED",
        "both",
        "agent.input",
        "source",
    ),
    (
        "ovp",
        lambda d: _item(d, "enums", "InputSource")["values"].append(
            {"value": "telepathy", "description": "x"}
        ),
        "ENUM_VALUE_ADDED",
        "old_receivers",
        "agent.input",
        "source",
    ),
    (
        "ovp",
        lambda d: _item(d, "enums", "InputSource").update(open=True),
        "ENUM_OPENED",
        "old_receivers",
        "agent.input",
        "source",
    ),
    # a new type sent to a receiver that rejects unknown types (the gateway)
    (
        "ovp",
        lambda d: _copy_message(d, "agent.cancel", "agent.poke", "AgentPoke"),
        "MESSAGE_ADDED",
        "old_receivers",
        "agent.poke",
        None,
    ),
    (
        "brisvox",
        lambda d: _copy_message(d, "say", "sing", "Sing"),
        "MESSAGE_ADDED",
        "old_receivers",
        "sing",
        None,
    ),
    # senders changed
    (
        "ovp",
        lambda d: _message(d, "agent.input").update(senders=["client", "server"]),
        "MESSAGE_SENDER_ADDED",
        "old_receivers",
        "agent.input",
        None,
    ),
    (
        "ovp",
        lambda d: _message(d, "screen.share").update(senders=["server"]),
        "MESSAGE_SENDER_REMOVED",
        "old_senders",
        "screen.share",
        None,
    ),
    # limits: bytes, length, count, range; tightened and loosened
    (
        "brisvox",
        lambda d: _field(d, "say", "text").update(max_bytes=10),
        "FIELD_LIMIT_TIGHTENED",
        "old_senders",
        "say",
        "text",
    ),
    (
        "ovp",
        lambda d: _field(d, "agent.tool.invoke", "name").update(max_length=10_000),
        "FIELD_LIMIT_LOOSENED",
        "old_receivers",
        "agent.tool.invoke",
        "name",
    ),
    (
        "brisvox",
        lambda d: _field(d, "tools.set", "enabled").update(max_length=1),
        "FIELD_LIMIT_TIGHTENED",
        "old_senders",
        "tools.set",
        "enabled",
    ),
    (
        "ovp",
        lambda d: _field(d, "session.resume", "last_server_seq").update(minimum=1),
        "FIELD_LIMIT_TIGHTENED",
        "old_senders",
        "session.resume",
        "last_server_seq",
    ),
    (
        "ovp",
        lambda d: _field(d, "session.resume", "last_server_seq").pop("maximum"),
        "FIELD_LIMIT_LOOSENED",
        "old_receivers",
        "session.resume",
        "last_server_seq",
    ),
    # pattern, not_blank, const, uniqueness
    (
        "ovp",
        lambda d: _field(d, "agent.tool.invoke", "name").update(pattern="^[a-z]+$"),
        "FIELD_PATTERN_CHANGED",
        "both",
        "agent.tool.invoke",
        "name",
    ),
    (
        "ovp",
        lambda d: _field(d, "agent.thinking", "delta").update(pattern="^.+$"),
        "FIELD_PATTERN_CHANGED",
        "old_senders",
        "agent.thinking",
        "delta",
    ),
    (
        "ovp",
        lambda d: _field(d, "agent.thinking", "delta").update(not_blank=True),
        "FIELD_NOT_BLANK_CHANGED",
        "old_senders",
        "agent.thinking",
        "delta",
    ),
    (
        "ovp",
        lambda d: _field(d, "agent.input", "text").pop("not_blank"),
        "FIELD_NOT_BLANK_CHANGED",
        "old_receivers",
        "agent.input",
        "text",
    ),
    (
        "ovp",
        lambda d: _field(d, "session.start", "protocol_version").update(const="1.1"),
        "FIELD_CONST_CHANGED",
        "both",
        "session.start",
        "protocol_version",
    ),
    (
        "brisvox",
        lambda d: _field(d, "session.accept", "tools").pop("unique_by"),
        "FIELD_UNIQUE_CHANGED",
        "old_receivers",
        "session.accept",
        "tools",
    ),
    (
        "brisvox",
        lambda d: _message(d, "tool.result").pop("rules"),
        "MESSAGE_RULE_REMOVED",
        "old_receivers",
        "tool.result",
        None,
    ),
    # error code removed
    (
        "ovp",
        lambda d: _drop(d["errors"], _unused_error_code(d), "code"),
        "ERROR_CODE_REMOVED",
        "old_senders",
        None,
        "<unused>",
    ),
    # frame layout, flags, size, const
    ("ovp", _swap_frame_fields, "FRAME_LAYOUT_CHANGED", "both", "AudioFrame", "direction"),
    (
        "ovp",
        lambda d: d["frames"][0]["fields"][1]["flags"].pop(),
        "FRAME_FLAGS_CHANGED",
        "both",
        "AudioFrame",
        "flags",
    ),
    (
        "ovp",
        lambda d: d["frames"][0]["fields"][1]["flags"].append(
            {"bit": 3, "name": "comfort_noise", "description": "x"}
        ),
        "FRAME_FLAGS_CHANGED",
        "old_receivers",
        "AudioFrame",
        "flags",
    ),
    (
        "ovp",
        lambda d: (
            d["frames"][0].update(size=332),
            d["frames"][0]["fields"][-1].update(size=320),
        ),
        "FRAME_SIZE_CHANGED",
        "both",
        "AudioFrame",
        None,
    ),
    (
        "ovp",
        lambda d: d["frames"][0]["fields"][0].update(const=2),
        "FRAME_CONST_CHANGED",
        "both",
        "AudioFrame",
        "version",
    ),
    # close codes
    (
        "ovp",
        lambda d: _item(d, "close_codes", "too_large").update(code=1010),
        "CLOSE_CODE_CHANGED",
        "both",
        None,
        "too_large",
    ),
    # constants and timings
    (
        "ovp",
        lambda d: _item(d, "constants", "resume_window_ms").update(value=10_000),
        "TIMING_CHANGED",
        "both",
        None,
        "resume_window_ms",
    ),
    (
        "ovp",
        lambda d: _item(d, "constants", "subprotocol_mismatch_http_status").update(value=426),
        "CONSTANT_CHANGED",
        "both",
        None,
        "subprotocol_mismatch_http_status",
    ),
    # a breaking change without a version bump
    (
        "ovp",
        lambda d: _drop(d["messages"], "agent.cancel", "type"),
        "PROTOCOL_VERSION_NOT_BUMPED",
        "both",
        None,
        None,
    ),
    # API only: the wire is kept
    (
        "ovp",
        lambda d: _message(d, "agent.input").update(name="AgentTextInput"),
        "MESSAGE_CLASS_RENAMED",
        "users",
        "agent.input",
        None,
    ),
    (
        "ovp",
        lambda d: _item(d, "enums", "InputSource")["values"][0].update(name="spoken_word"),
        "ENUM_MEMBER_RENAMED",
        "users",
        "agent.input",
        "source",
    ),
    (
        "ovp",
        lambda d: _drop(d["constants"], "subprotocol_mismatch_http_status"),
        "CONSTANT_REMOVED",
        "users",
        None,
        "subprotocol_mismatch_http_status",
    ),
]


def _key(f: Finding) -> tuple[str, str, str | None, str | None]:
    return (f.rule, f.side, f.message, f.field)


@pytest.mark.parametrize(
    ("protocol", "mutate", "rule", "side", "message", "field"),
    CASES,
    ids=[f"{c[0]}-{c[2]}-{c[4]}-{c[5]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_change_is_found_with_its_rule_side_message_and_field(
    tmp_path: Path,
    protocol: str,
    mutate: Mutation,
    rule: str,
    side: str,
    message: str | None,
    field: str | None,
) -> None:
    if field == "<unused>":
        field = _unused_error_code(_raw(protocol))
    try:
        new = _mutated(protocol, mutate, tmp_path)
    except SpecError as exc:  # the mutation must make a valid spec, or the test proves nothing
        pytest.fail(f"the mutated spec is invalid: {exc}")
    found = compare(_spec(protocol), new)
    assert (rule, side, message, field) in [_key(f) for f in found], "\n".join(map(str, found))
    assert RULES[rule].kind == ("api" if side == "users" else "wire")
    if side != "users":
        assert "PROTOCOL_VERSION_NOT_BUMPED" in {f.rule for f in found}
    assert all(f.accepted_by is None for f in found)


def test_every_rule_has_a_case_or_a_reason() -> None:
    covered = {c[2] for c in CASES}
    # Rules no single-spec mutation reaches: a whole protocol gone, a changed subprotocol (the
    # constant of the same name fires too), a rule added (the same code as removed), an optional
    # field added where unknown fields are refused, a Python name decided by codegen/names.py.
    elsewhere = {
        "PROTOCOL_REMOVED",
        "TRANSPORT_CHANGED",
        "MESSAGE_RULE_ADDED",
        "FIELD_ADDED_UNKNOWN_REJECTED",
        "ENUM_CLOSED",
        "FRAME_REMOVED",
        "FIELD_ATTRIBUTE_RENAMED",
        "ERROR_CODE_MEMBER_RENAMED",
        "CONSTANT_RENAMED",
        "CLOSE_CODE_REMOVED",
        "CLOSE_CODE_MEMBER_RENAMED",
    }
    assert set(RULES) - covered == elsewhere


def test_a_field_added_where_unknown_fields_are_refused(tmp_path: Path) -> None:
    def add(data: Data) -> None:
        patch = _item(data, "types", "SessionPatch")
        assert patch.get("unknown_fields") == "reject"
        patch["fields"].append(
            {"name": "mood", "type": "string", "required": False, "description": "x"}
        )

    found = compare(_spec("ovp"), _mutated("ovp", add, tmp_path))
    assert ("FIELD_ADDED_UNKNOWN_REJECTED", "old_receivers", "session.update", "patch.mood") in [
        _key(f) for f in found
    ]


def test_a_python_rename_that_keeps_the_wire_is_an_api_change_only() -> None:
    old = _spec("ovp")
    message = next(m for m in old.messages if m.type == "agent.input")
    renamed = tuple(
        replace(f, py_name="content") if f.wire_name == "text" else f for f in message.fields
    )
    new = replace(
        old,
        messages=tuple(replace(m, fields=renamed) if m is message else m for m in old.messages),
    )
    found = compare(old, new)
    assert [_key(f) for f in found] == [("FIELD_ATTRIBUTE_RENAMED", "users", "agent.input", "text")]
    assert found[0].kind == "api"


@pytest.mark.parametrize("protocol", ["brisvox", "ovp"])
def test_a_spec_against_itself_finds_nothing(protocol: str) -> None:
    assert compare(_spec(protocol), _spec(protocol)) == []


def _additive(data: Data) -> None:
    """Only compatible additions: a server event (clients accept unknown types), an optional
    field where unknown fields are ignored, a value of an open enum, a constant, a decision."""
    _copy_message(data, "agent.thinking", "agent.mood", "AgentMood")
    _message(data, "agent.input")["fields"].append(
        {"name": "hint", "type": "string", "required": False, "description": "x"}
    )
    _item(data, "enums", "SessionEndReason")["values"].append(
        {"value": "maintenance", "description": "x"}
    )
    data["constants"].append(
        {
            "name": "breaking_test_constant",
            "value": 7,
            "unit": "none",
            "group": "limits",
            "description": "x",
        }
    )
    data["decisions"].append(
        {"id": "breaking-test", "quote": "silent", "source": "DERIVED", "decision": "x"}
    )


def test_an_additive_compatible_change_finds_nothing(tmp_path: Path) -> None:
    assert compare(_spec("ovp"), _mutated("ovp", _additive, tmp_path)) == []


def test_a_version_bump_clears_the_version_finding(tmp_path: Path) -> None:
    def change(data: Data) -> None:
        _bump_version(data)
        _drop(data["messages"], "agent.cancel", "type")

    rules = {f.rule for f in compare(_spec("ovp"), _mutated("ovp", change, tmp_path))}
    assert "MESSAGE_REMOVED" in rules
    assert "PROTOCOL_VERSION_NOT_BUMPED" not in rules


def test_a_decision_accepts_a_finding(tmp_path: Path) -> None:
    def change(data: Data) -> None:
        _drop(data["messages"], "agent.cancel", "type")
        data["decisions"].append(
            {
                "id": "agent-cancel-withdrawn",
                "quote": "silent",
                "source": "DERIVED",
                "decision": "No gateway ever honoured it.",
                "accepts": [
                    {"rule": "MESSAGE_REMOVED", "message": "agent.cancel", "old": "agent.cancel"}
                ],
            }
        )

    found = compare(_spec("ovp"), _mutated("ovp", change, tmp_path))
    assert [(f.rule, f.accepted_by) for f in found] == [
        ("MESSAGE_REMOVED", "agent-cancel-withdrawn")
    ]
    assert "[accepted by decision agent-cancel-withdrawn]" in str(found[0])


def _limit_accepted(max_bytes: int, accepted: tuple[int, int]) -> Mutation:
    """say.text's max_bytes set to ``max_bytes``; a decision accepts the tightening
    ``accepted`` (old, new)."""

    def change(data: Data) -> None:
        _field(data, "say", "text")["max_bytes"] = max_bytes
        data["decisions"].append(
            {
                "id": "say-text-shorter",
                "quote": "silent",
                "source": "DERIVED",
                "decision": "TTS engines refuse longer lines.",
                "accepts": [
                    {
                        "rule": "FIELD_LIMIT_TIGHTENED",
                        "message": "say",
                        "field": "text",
                        "old": accepted[0],
                        "new": accepted[1],
                    }
                ],
            }
        )

    return change


def test_an_acceptance_is_pinned_to_the_values_it_names(tmp_path: Path) -> None:
    old = _spec("brisvox")
    was = next(
        f for m in old.messages if m.type == "say" for f in m.fields if f.wire_name == "text"
    )
    assert was.max_bytes is not None
    limit = int(was.max_bytes.value)
    exact = compare(old, _mutated("brisvox", _limit_accepted(1000, (limit, 1000)), tmp_path / "a"))
    assert [(f.rule, f.values, f.accepted_by) for f in exact] == [
        ("FIELD_LIMIT_TIGHTENED", (limit, 1000), "say-text-shorter")
    ]
    # The same item tightened again (1000, then 999): a new finding, not the accepted one.
    again = compare(old, _mutated("brisvox", _limit_accepted(999, (limit, 1000)), tmp_path / "b"))
    assert [(f.rule, f.values, f.accepted_by) for f in again] == [
        ("FIELD_LIMIT_TIGHTENED", (limit, 999), None),
        ("PROTOCOL_VERSION_NOT_BUMPED", (old.version, old.version), None),
    ]


def _policy_code(code: int) -> Mutation:
    def change(data: Data) -> None:
        _item(data, "close_codes", "policy")["code"] = code

    return change


def test_a_close_code_that_was_a_constant_is_compared_with_the_release(tmp_path: Path) -> None:
    # 0.1.0 had the constant policy_close_code (1008); a decision accepts that it became the
    # close code policy, pinned to 1008: a new number is a wire change the release gate reports.
    release = resolve(load(RELEASES / "0.1.0" / "ovp.yaml"))
    today = compare(release, _spec("ovp"))
    assert {f.rule for f in today if f.accepted_by is None} == set()
    changed = compare(release, _mutated("ovp", _policy_code(4008), tmp_path))
    failing = [(f.rule, f.side, f.field, f.values) for f in changed if f.accepted_by is None]
    assert failing == [
        ("CLOSE_CODE_CHANGED", "both", "policy", (1008, 4008)),
        ("PROTOCOL_VERSION_NOT_BUMPED", "both", None, ("1.0", "1.0")),
    ]
    head = compare(_spec("ovp"), _mutated("ovp", _policy_code(4008), tmp_path / "head"))
    assert [(f.rule, f.side) for f in head][:1] == [("CLOSE_CODE_CHANGED", "both")]


def test_a_move_to_an_unknown_close_code_is_a_spec_error(tmp_path: Path) -> None:
    def change(data: Data) -> None:
        decision = _item(data, "close_codes", "normal")["decisions"][0]
        decision["accepts"][0]["moved_to"] = "close_codes.nomral"

    with pytest.raises(SpecError, match=r"moved to 'close_codes\.nomral', which is no close code"):
        _mutated("ovp", change, tmp_path)


def test_an_acceptance_of_another_message_accepts_nothing(tmp_path: Path) -> None:
    def change(data: Data) -> None:
        _drop(data["messages"], "agent.cancel", "type")
        data["decisions"].append(
            {
                "id": "wrong-one",
                "quote": "silent",
                "source": "DERIVED",
                "decision": "x",
                "accepts": [{"rule": "MESSAGE_REMOVED", "message": "agent.input"}],
            }
        )

    found = compare(_spec("ovp"), _mutated("ovp", change, tmp_path))
    assert {f.accepted_by for f in found} == {None}


def _write(protocol: str, mutate: Mutation, folder: Path) -> Path:
    data = copy.deepcopy(_raw(protocol))
    mutate(data)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{protocol}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def test_an_acceptance_of_an_unknown_rule_is_a_spec_error(tmp_path: Path) -> None:
    def change(data: Data) -> None:
        data["decisions"].append(
            {
                "id": "typo",
                "quote": "silent",
                "source": "DERIVED",
                "decision": "x",
                "accepts": [{"rule": "MESAGE_REMOVED"}],
            }
        )

    new = _mutated("ovp", change, tmp_path / "new")
    with pytest.raises(SpecError, match="accepts unknown rule 'MESAGE_REMOVED'"):
        report(str(ROOT / "spec" / "ovp.yaml"), current=[new])


def test_the_command_in_json_and_text(tmp_path: Path) -> None:
    # The older spec has agent.cancel's turn_id optional... and an extra message today's lacks.
    def older(data: Data) -> None:
        _copy_message(data, "agent.cancel", "agent.pause", "AgentPause")

    older_path = _write("ovp", older, tmp_path / "old")
    command = [sys.executable, "-m", "codegen", "breaking", "--against", str(older_path)]
    run = subprocess.run(
        [*command, "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1, run.stderr
    out = json.loads(run.stdout)
    assert out["breaking"] == 2
    assert [(f["rule"], f["side"], f["message"], f["kind"]) for f in out["findings"]] == [
        ("MESSAGE_REMOVED", "old_senders", "agent.pause", "wire"),
        ("PROTOCOL_VERSION_NOT_BUMPED", "both", None, "wire"),
    ]
    text = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert text.returncode == 1
    assert "ovp: message agent.pause: MESSAGE_REMOVED (wire, breaks old client senders)" in (
        text.stdout
    )
    assert text.stdout.rstrip().endswith("2 breaking change(s) against " + str(older_path))


def test_the_command_against_a_git_ref() -> None:
    # HEAD's committed specs: today's may only differ from them by what this checkout changes.
    run = subprocess.run(
        [sys.executable, "-m", "codegen", "breaking", "--against", "HEAD", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if run.returncode == 2 and "not a git repository" in run.stderr:
        pytest.skip("not a git checkout")
    assert run.returncode in (0, 1), run.stderr
    assert json.loads(run.stdout)["against"] == "HEAD"


def test_an_unknown_ref_is_a_clear_error() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "codegen", "breaking", "--against", "no-such-ref-xyz"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "no-such-ref-xyz:1: neither a spec path nor a git ref of" in run.stderr
    assert "Traceback" not in run.stderr


def _last_release() -> Path:
    versions = sorted(
        (p for p in RELEASES.iterdir() if p.is_dir()),
        key=lambda p: tuple(int(x) for x in p.name.split(".")),
    )
    return versions[-1]


def test_no_unrecorded_break_since_the_last_release() -> None:
    """What CI enforces: every break since the release is accepted by a decision of its own."""
    found = report(str(_last_release()))
    assert found.failing == (), (
        "the specs break the last release; bump protocol.version or record each break as a "
        "decision with `accepts:` (docs/evolution.md):\n" + "\n".join(map(str, found.failing))
    )


def test_the_release_copies_are_whole_specs() -> None:
    release = _last_release()
    assert sorted(p.name for p in release.glob("*.yaml")) == sorted(
        p.name for p in (ROOT / "spec").glob("*.yaml")
    )
    from voxwire._version import __version__

    assert tuple(int(x) for x in release.name.split(".")) <= tuple(
        int(x) for x in __version__.split(".")
    )


def test_every_rule_is_documented() -> None:
    page = (ROOT / "docs" / "evolution.md").read_text(encoding="utf-8")
    missing = [rule for rule in RULES if f"`{rule}`" not in page]
    assert missing == []


# -- cross-version vectors: the older spec's vectors on today's runtime ---------------------------


def _differences(old: Protocol) -> tuple[list[str], list[str]]:
    """The ids of ``old``'s generated vectors today's runtime answers otherwise, and of those no
    wire finding of ``breaking`` (old to today) explains: one that names the case's message, or
    one about the whole protocol."""
    from codegen.vectors import build_cases
    from voxwire.conformance import Case, answer, check, request

    findings = [f for f in compare(old, _spec(old.id)) if f.kind == "wire"]
    named = {f.message for f in findings}
    differ, unexplained = [], []
    for data in build_cases(old)[0]:
        case = Case(data["id"], data["protocol"], data["kind"], data, "cross-version")
        if check(data["expect"], answer(request(case))) is None:
            continue
        differ.append(case.id)
        message = case.id.split("/")[2]
        if message not in named and None not in named:
            unexplained.append(case.id)
    return differ, unexplained


@pytest.mark.parametrize("protocol", ["brisvox", "ovp"])
def test_the_last_releases_vectors_differ_on_todays_runtime_only_where_breaking_says(
    protocol: str,
) -> None:
    old = next(p for p in _release_protocols() if p.id == protocol)
    _, unexplained = _differences(old)
    assert unexplained == []


def test_a_difference_of_runtimes_is_explained_by_a_finding(tmp_path: Path) -> None:
    # An "older" spec whose say.text allowed twice the bytes: its vectors at that bound fail on
    # today's runtime, and FIELD_LIMIT_TIGHTENED on say.text explains each.
    def older(data: Data) -> None:
        _field(data, "say", "text")["max_bytes"] = (
            2 * _item(data, "constants", "max_line_bytes")["value"]
        )

    old = _mutated("brisvox", older, tmp_path)
    differ, unexplained = _differences(old)
    assert differ and all("/say/" in case_id for case_id in differ), differ
    assert unexplained == []


@cache
def _release_protocols() -> tuple[Protocol, ...]:
    from codegen.breaking import load_against

    return tuple(load_against(str(_last_release())))
