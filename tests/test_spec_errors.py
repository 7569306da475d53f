"""What a spec author sees when a spec is wrong: every problem, with file, line, YAML path and a
message that names the mistake.

Each malformed spec is the valid one below with one small textual edit, so a case shows exactly what
is broken. Expected lines are found from the text (the line of a marker), never hard-coded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen.ir import Protocol
from codegen.loader import Problem, SpecError, load
from codegen.pipeline import load_protocols
from codegen.resolver import resolve

DISPLAY = "spec/toy.yaml"

VALID_SPEC = """\
# yaml-language-server: $schema=spec-format.schema.json
format: 1

protocol:
  id: toy
  title: Toy protocol
  version: "1"
  document: toy-protocol.txt
  description: A small protocol for the tests of the spec loader.
  max_message_bytes: max_message_bytes

senders:
  - id: server
    title: Toy server
    description: The end that starts calls.
    include: [envelope]
    unknown_types: accept
  - id: agent
    title: Toy agent
    description: The end that answers.
    unknown_types: reject

field_sets:
  envelope:
    - name: seq
      type: integer
      minimum: 1
      description: Message number.
  command:
    - name: id
      type: string
      required: false
      max_bytes: max_id_bytes
      description: The command's id.

errors:
  - code: bad_message
    description: The message cannot be read.
  - code: invalid_argument
    description: A value breaks a rule.
  - code: audio_frame_invalid
    description: A binary frame of the wrong size or header.

decode_errors:
  malformed: bad_message
  missing_field: bad_message
  wrong_type: bad_message
  unknown_field: bad_message
  invalid_value: invalid_argument
  too_many: invalid_argument
  too_large: bad_message
  unknown_type: bad_message
  wrong_sender: bad_message

constants:
  - name: max_message_bytes
    value: 65536
    unit: bytes
    group: limits
    description: Largest message.
  - name: max_id_bytes
    value: 64
    unit: bytes
    group: limits
    description: Largest command id.

enums:
  - name: Mood
    description: How the caller sounds.
    values:
      - {value: calm, description: Calm.}
      - {value: angry, description: Angry.}
  - name: Direction
    description: Which way a frame goes.
    values:
      - {value: 0, name: server_to_agent, description: To the agent.}
      - {value: 1, name: agent_to_server, description: From the agent.}

types:
  - name: Caller
    description: Who is calling.
    fields:
      - name: number
        type: string
        pattern: "^[0-9+]+$"
        description: The phone number.
      - name: mood
        type: Mood
        required: false
        description: How they sound.

messages:
  - type: call.start
    senders: [server]
    group: Events
    summary: A call starts.
    fields:
      - name: caller
        type: Caller
        description: Who calls.
    examples:
      - description: A calm caller.
        json: {type: call.start, seq: 1, caller: {number: "+4512345678", mood: calm}}
  - type: say
    senders: [agent]
    group: Commands
    summary: Speak a line.
    include: [command]
    fields:
      - name: text
        type: string
        max_bytes: max_message_bytes
        description: The line.
      - name: ssml
        type: string
        required: false
        description: The line as SSML.
    rules:
      - kind: at_least_one_of
        fields: [text, ssml]
        description: A line needs text or ssml.
    examples:
      - description: A line.
        json: {type: say, id: c1, text: Hello.}
  - type: hangup
    senders: [agent]
    group: Commands
    summary: End the call.
    include: [command]
    examples:
      - description: Hang up.
        json: {type: hangup}
    decisions:
      - id: hangup-is-final
        quote: The document does not say whether hangup can be undone.
        source: toy-protocol.txt, Commands
        decision: A hangup is final.

frames:
  - name: AudioFrame
    description: Audio in either direction.
    byte_order: little
    size: 12
    error: audio_frame_invalid
    fields:
      - {name: version, type: u8, const: 1, description: Always 1.}
      - {name: direction, type: u8, enum: Direction, description: Which way.}
      - {name: pcm, type: bytes, size: 10, description: Samples.}
    examples:
      - {description: Silence., header: {version: 1, direction: 0}, fill: "00"}
"""


def edit(text: str, old: str, new: str) -> str:
    """``text`` with its one occurrence of ``old`` replaced (a typo in a case fails loudly)."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def line_of(text: str, marker: str, nth: int = 1) -> int:
    """The 1-based line of the ``nth`` occurrence of ``marker`` in ``text``."""
    at = -1
    for _ in range(nth):
        at = text.find(marker, at + 1)
        assert at >= 0, f"{marker!r} does not occur {nth} time(s)"
    return text.count("\n", 0, at) + 1


def load_and_resolve(path: Path, display: str = DISPLAY) -> Protocol:
    return resolve(load(path, display))


def problems_of(text: str, tmp_path: Path, name: str = "toy.yaml") -> list[Problem]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_and_resolve(path)
    assert str(caught.value) == "\n".join(str(p) for p in caught.value.problems)
    return caught.value.problems


# -- the valid spec --------------------------------------------------------------------------------


def test_the_valid_spec_loads_and_resolves(tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(VALID_SPEC, encoding="utf-8")
    protocol = load_and_resolve(path)
    assert protocol.id == "toy"
    assert protocol.spec_file == DISPLAY
    assert [m.type for m in protocol.messages] == ["call.start", "say", "hangup"]
    assert [s.id for s in protocol.senders] == ["server", "agent"]
    assert [f.wire_name for f in protocol.messages[0].fields] == ["seq", "caller"]
    assert [f.wire_name for f in protocol.messages[1].fields] == ["id", "text", "ssml"]
    assert protocol.messages[1].fields[1].max_bytes is not None
    assert protocol.messages[1].fields[1].max_bytes.value == 65536
    assert [s.name for s in protocol.structs] == ["Caller"]
    assert [e.name for e in protocol.enums] == ["Mood", "Direction"]
    assert [d.id for d in protocol.decisions] == ["hangup-is-final"]
    assert protocol.frames[0].size == 12
    assert [f.offset for f in protocol.frames[0].fields] == [0, 1, 2]


# -- one mistake at a time -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    old: str
    new: str
    """The edit: ``old`` (which occurs once in the valid spec) becomes ``new``."""
    marker: str
    """Text on the line the problem must name (in the edited spec)."""
    path: str
    message: str
    """The exact message; ``{first}`` is the line of ``first`` (an earlier definition)."""
    nth: int = 1
    first: tuple[str, int] | None = None
    """(marker, nth) of the line ``{first}`` stands for."""
    also: tuple[tuple[str, str], ...] = ()
    """Further (old, new) edits, when the mistake takes more than one."""


DECISION = "\n      - {id: hangup-is-final, quote: Again., source: s, decision: Again.}"

CASES = [
    # The YAML itself.
    Case(
        "yaml-tab-indent",
        "    title: Toy server\n",
        "    title: Toy server\n\tcolour: red\n",
        marker="\tcolour: red",
        path="",
        message="bad YAML: found character '\\t' that cannot start any token",
    ),
    Case(
        "yaml-unclosed-bracket",
        "include: [envelope]",
        "include: [envelope",
        # PyYAML notices on the next line; the message says where the bracket was opened.
        marker="    unknown_types: accept",
        path="",
        message="bad YAML: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line {first})",
        first=("include: [envelope", 1),
    ),
    Case(
        "yaml-bad-indent",
        "    title: Toy agent\n",
        "      title: Toy agent\n",
        marker="      title: Toy agent",
        path="",
        message="bad YAML: mapping values are not allowed here",
    ),
    Case(
        "duplicate-yaml-key",
        "  title: Toy protocol\n",
        "  title: Toy protocol\n  title: Toy protocol 2\n",
        marker="  title: Toy protocol 2",
        path="protocol.title",
        message="duplicate key 'title' (first at line {first})",
        first=("  title: Toy protocol\n", 1),
    ),
    # The format's JSON Schema.
    Case(
        "wrong-type-required-yes",
        "        required: false\n        description: How",
        '        required: "yes"\n        description: How',
        marker='required: "yes"',
        path="types[0].fields[1].required",
        message="'yes' is not of type 'boolean'",
    ),
    Case(
        "wrong-type-frame-size",
        "    size: 12\n",
        "    size: twelve\n",
        marker="size: twelve",
        path="frames[0].size",
        message="'twelve' is not of type 'integer'",
    ),
    Case(
        "message-without-summary",
        "    summary: End the call.\n",
        "",
        marker="  - type: hangup",
        path="messages[2]",
        message="'summary' is required",
    ),
    Case(
        "unknown-key",
        "    summary: End the call.\n",
        "    summary: End the call.\n    colour: red\n",
        marker="    colour: red",
        path="messages[2].colour",
        message="unknown key 'colour'",
    ),
    Case(
        "unanchored-pattern",
        'pattern: "^[0-9+]+$"',
        'pattern: "[0-9+]+"',
        marker="pattern:",
        path="types[0].fields[0].pattern",
        message="pattern '[0-9+]+' is not anchored (^...$)",
    ),
    # Cross-references, checked by the resolver.
    Case(
        "unknown-type-reference",
        "        type: Caller\n",
        "        type: Callr\n",
        marker="type: Callr",
        path="messages[0].fields[0].type",
        message="unknown type 'Callr'",
    ),
    Case(
        "duplicate-message-type",
        "  - type: hangup\n",
        "  - type: say\n",
        also=(("{type: hangup}", "{type: say}"),),
        marker="  - type: say\n",
        nth=2,
        path="messages[2].type",
        message="duplicate message type 'say' (first at line {first})",
        first=("  - type: say\n", 1),
    ),
    Case(
        "duplicate-python-class-name",
        "    summary: End the call.\n",
        "    name: Say\n    summary: End the call.\n",
        marker="    name: Say",
        path="messages[2].name",
        message="duplicate Python class name 'Say' (first at line {first})",
        first=("  - type: say\n", 1),
    ),
    Case(
        "duplicate-type-name",
        "\ntypes:\n",
        "  - name: Mood\n    description: Again.\n    values:\n"
        "      - {value: x, description: X.}\n\ntypes:\n",
        marker="  - name: Mood",
        nth=2,
        path="enums[2].name",
        message="duplicate type name 'Mood' (first at line {first})",
        first=("  - name: Mood", 1),
    ),
    Case(
        "duplicate-field-with-envelope",
        "      - name: caller\n",
        "      - name: seq\n",
        marker="      - name: seq",
        path="messages[0].fields[0]",
        message="duplicate field 'seq' (first at line {first})",
        first=("    - name: seq", 1),
    ),
    Case(
        "unknown-constant-in-max-bytes",
        "max_bytes: max_message_bytes",
        "max_bytes: max_line_bytes",
        marker="max_bytes: max_line_bytes",
        path="messages[1].fields[0].max_bytes",
        message="unknown constant 'max_line_bytes'",
    ),
    Case(
        "unknown-constant-in-max-message-bytes",
        "  max_message_bytes: max_message_bytes",
        "  max_message_bytes: max_msg_bytes",
        marker="max_message_bytes: max_msg_bytes",
        path="protocol.max_message_bytes",
        message="unknown integer constant 'max_msg_bytes'",
    ),
    Case(
        "union-named-like-a-class",
        "    summary: End the call.\n",
        "    name: Command\n    summary: End the call.\n",
        marker="  command:",
        path="field_sets.command",
        message="the union Command has the name of a class (line {first})",
        first=("    name: Command", 1),
    ),
    Case(
        "enum-of-message-types-names-no-message",
        "    description: How the caller sounds.\n",
        "    description: How the caller sounds.\n    message_types: true\n",
        marker="    message_types: true",
        path="enums[0].message_types",
        message="Mood holds values that are no message type: calm, angry",
    ),
    Case(
        "error-carried-by-an-unknown-message",
        "    description: The message cannot be read.\n",
        "    description: The message cannot be read.\n    carried_by: [call.stop]\n",
        marker="    carried_by: [call.stop]",
        path="errors[0].carried_by[0]",
        message="unknown message type 'call.stop'",
    ),
    Case(
        "message-types-constant-names-an-unknown-message",
        "    description: Largest command id.\n",
        "    description: Largest command id.\n  - name: flushing\n    value: [say, call.stop]\n"
        "    unit: message_types\n    group: protocol\n    description: Flushes.\n",
        marker="    value: [say, call.stop]",
        path="constants[2].value[1]",
        message="flushing: unknown message type 'call.stop'",
    ),
    Case(
        "message-types-constant-repeats-a-type",
        "    description: Largest command id.\n",
        "    description: Largest command id.\n  - name: flushing\n    value: [say, hangup, say]\n"
        "    unit: message_types\n    group: protocol\n    description: Flushes.\n",
        marker="    value: [say, hangup, say]",
        path="constants[2].value[2]",
        message="duplicate message type 'say' (first at line {first})",
        first=("    value: [say, hangup, say]", 1),
    ),
    Case(
        "error-end-reason-not-in-its-enum",
        "    description: The message cannot be read.\n",
        "    description: The message cannot be read.\n    end_reason: {enum: Mood, value: sad}\n",
        marker="    end_reason:",
        path="errors[0].end_reason.value",
        message="'sad' is not a value of Mood",
    ),
    Case(
        "error-closes-with-an-unknown-close-code",
        "    description: The message cannot be read.\n",
        "    description: The message cannot be read.\n    close_code: policy\n",
        marker="    close_code: policy",
        path="errors[0].close_code",
        message="unknown close code 'policy'",
    ),
    Case(
        "duplicate-close-code",
        "\ndecode_errors:\n",
        "\nclose_codes:\n  - {name: normal, code: 1000, description: Done.}\n"
        "  - {name: done, code: 1000, description: Done too.}\n\ndecode_errors:\n",
        marker="  - {name: done",
        path="close_codes[1].code",
        message="duplicate close code '1000' (first at line {first})",
        first=("  - {name: normal", 1),
    ),
    Case(
        "frame-sizes-do-not-add-up",
        "    size: 12\n",
        "    size: 13\n",
        marker="    size: 13",
        path="frames[0].size",
        message="the fields add up to 12 bytes, not 13",
    ),
    Case(
        "invalid-regex",
        'pattern: "^[0-9+]+$"',
        'pattern: "^[0-9++$"',
        marker="pattern:",
        path="types[0].fields[0].pattern",
        message="bad regular expression: unterminated character set at position 1",
    ),
    Case(
        "unknown-error-code-in-decode-errors",
        "  too_many: invalid_argument\n",
        "  too_many: invalid_arg\n",
        marker="too_many: invalid_arg",
        path="decode_errors.too_many",
        message="unknown error code 'invalid_arg'",
    ),
    Case(
        "unknown-error-code-in-frame",
        "    error: audio_frame_invalid\n",
        "    error: frame_invalid\n",
        marker="error: frame_invalid",
        path="frames[0].error",
        message="unknown error code 'frame_invalid'",
    ),
    Case(
        "unknown-sender",
        "    senders: [server]\n",
        "    senders: [servr]\n",
        marker="senders: [servr]",
        path="messages[0].senders[0]",
        message="unknown sender 'servr'",
    ),
    Case(
        "unknown-field-set-in-include",
        "    include: [command]\n    fields:",
        "    include: [comand]\n    fields:",
        marker="include: [comand]",
        path="messages[1].include[0]",
        message="unknown field set 'comand'",
    ),
    Case(
        "duplicate-decision-id",
        "        decision: A hangup is final.\n",
        "        decision: A hangup is final." + DECISION + "\n",
        marker=DECISION.strip(),
        path="messages[2].decisions[1].id",
        message="duplicate decision id 'hangup-is-final' (first at line {first})",
        first=("      - id: hangup-is-final", 1),
    ),
    Case(
        # The sender is resolved after the messages, yet the later decision is the duplicate.
        "duplicate-decision-id-earlier-in-file",
        "    unknown_types: reject\n",
        "    unknown_types: reject\n    decisions:" + DECISION + "\n",
        marker="      - id: hangup-is-final",
        path="messages[2].decisions[0].id",
        message="duplicate decision id 'hangup-is-final' (first at line {first})",
        first=(DECISION.strip(), 1),
    ),
    Case(
        "rule-names-a-missing-field",
        "        fields: [text, ssml]\n",
        "        fields: [text, sml]\n",
        marker="fields: [text, sml]",
        path="messages[1].rules[0].fields[1]",
        message="no field 'sml' here",
    ),
    Case(
        "integer-enum-value-without-name",
        "{value: 1, name: agent_to_server, description",
        "{value: 1, description",
        marker="{value: 1, description",
        path="enums[1].values[1]",
        message="an integer value needs a name",
    ),
    Case(
        "example-of-another-type",
        "json: {type: hangup}",
        "json: {type: hang_up}",
        marker="json: {type: hang_up}",
        path="messages[2].examples[0].json.type",
        message="example of hangup has type 'hang_up'",
    ),
    Case(
        "u64-frame-field",
        "{name: direction, type: u8, enum: Direction",
        "{name: direction, type: u64, enum: Direction",
        also=(("    size: 12\n", "    size: 19\n"),),
        marker="type: u64",
        path="frames[0].fields[1].type",
        message="a u64 header field is not supported: the TypeScript binding reads header fields "
        "as numbers, exact only to 2^53; split it into two u32 fields",
    ),
    Case(
        "frame-without-an-enum-field",
        "{name: direction, type: u8, enum: Direction, description: Which way.}",
        "{name: direction, type: u8, description: Which way.}",
        marker="    fields:\n      - {name: version, type: u8",
        path="frames[0].fields",
        message="no header field has an enum: the decoders check one (the direction) against "
        "the sender",
    ),
    Case(
        "frame-direction-names-no-sender",
        "{value: 1, name: agent_to_server, description",
        "{value: 1, name: outbound, description",
        marker="{name: direction, type: u8, enum: Direction",
        path="frames[0].fields[1].enum",
        message="the values of Direction name the sender of each direction (server_to_..., "
        "agent_to_...): none names agent",
    ),
    Case(
        "session-role-twice",
        "    summary: End the call.\n",
        "    summary: End the call.\n    session: end\n",
        also=(("    summary: Speak a line.\n", "    summary: Speak a line.\n    session: end\n"),),
        marker="    session: end",
        nth=2,
        path="messages[2].session",
        message="duplicate session role 'end' (first at line {first})",
        first=("    session: end", 1),
    ),
    Case(
        "send-method-twice",
        "    summary: End the call.\n",
        "    summary: End the call.\n    send_method: send_say\n",
        marker="    send_method: send_say",
        path="messages[2].send_method",
        message="duplicate send method of agent 'send_say' (first at line {first})",
        first=("  - type: say", 1),
    ),
    Case(
        "send-method-of-a-stamped-message",
        "    summary: A call starts.\n",
        "    summary: A call starts.\n    stamped: true\n    send_method: send_call\n",
        marker="    send_method: send_call",
        path="messages[0].send_method",
        message="call.start is stamped: it has no send method",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_mistake_is_reported_at_its_line(case: Case, tmp_path: Path) -> None:
    text = edit(VALID_SPEC, case.old, case.new)
    for old, new in case.also:
        text = edit(text, old, new)
    first = line_of(text, *case.first) if case.first else None
    expected = Problem(
        DISPLAY,
        line_of(text, case.marker, case.nth),
        case.path,
        case.message.format(first=first),
    )
    assert problems_of(text, tmp_path) == [expected]
    where = f"{expected.path}: " if expected.path else ""
    assert str(expected) == f"{DISPLAY}:{expected.line}: {where}{expected.message}"


def test_every_required_case_is_covered() -> None:
    wanted = {
        "yaml-tab-indent", "yaml-unclosed-bracket", "duplicate-yaml-key", "wrong-type-required-yes",
        "message-without-summary", "unknown-key", "unknown-type-reference",
        "duplicate-message-type", "unknown-constant-in-max-bytes", "frame-sizes-do-not-add-up",
        "unanchored-pattern", "invalid-regex", "unknown-error-code-in-decode-errors",
        "unknown-sender", "unknown-field-set-in-include", "duplicate-decision-id",
        "rule-names-a-missing-field", "integer-enum-value-without-name", "example-of-another-type",
    }  # fmt: skip
    assert wanted <= {c.id for c in CASES}
    assert len({c.id for c in CASES}) == len(CASES)


# -- every problem at once -------------------------------------------------------------------------


def test_every_schema_problem_is_reported_at_once_in_line_order(tmp_path: Path) -> None:
    text = VALID_SPEC
    text = edit(text, "  title: Toy protocol\n", "  title: Toy protocol\n  title: Toy protocol 2\n")
    text = edit(text, "    title: Toy agent\n", "    title: Toy agent\n    colour: red\n")
    text = edit(
        text,
        "        required: false\n        description: How",
        '        required: "yes"\n        description: How',
    )
    text = edit(text, "    summary: End the call.\n", "")
    text = edit(text, "    size: 12\n", "    size: twelve\n")
    problems = problems_of(text, tmp_path)
    assert problems == [
        Problem(DISPLAY, line_of(text, "  title: Toy protocol 2"), "protocol.title",
                f"duplicate key 'title' (first at line {line_of(text, '  title: Toy protocol')})"),
        Problem(DISPLAY, line_of(text, "colour: red"), "senders[1].colour", "unknown key 'colour'"),
        Problem(DISPLAY, line_of(text, 'required: "yes"'), "types[0].fields[1].required",
                "'yes' is not of type 'boolean'"),
        Problem(DISPLAY, line_of(text, "  - type: hangup"), "messages[2]", "'summary' is required"),
        Problem(DISPLAY, line_of(text, "size: twelve"), "frames[0].size",
                "'twelve' is not of type 'integer'"),
    ]  # fmt: skip
    assert [p.line for p in problems] == sorted(p.line for p in problems)


def test_every_reference_problem_is_reported_at_once_in_line_order(tmp_path: Path) -> None:
    text = VALID_SPEC
    # Edited bottom-up on purpose: the report's order must not depend on the order of edits.
    text = edit(text, "    size: 12\n", "    size: 13\n")
    text = edit(text, "json: {type: hangup}", "json: {type: hang_up}")
    text = edit(text, "        fields: [text, ssml]\n", "        fields: [text, sml]\n")
    text = edit(text, "max_bytes: max_message_bytes", "max_bytes: max_line_bytes")
    text = edit(text, "    senders: [server]\n", "    senders: [servr]\n")
    text = edit(text, "        type: Caller\n", "        type: Callr\n")
    text = edit(text, 'pattern: "^[0-9+]+$"', 'pattern: "^[0-9++$"')
    text = edit(text, "  too_many: invalid_argument\n", "  too_many: invalid_arg\n")
    problems = problems_of(text, tmp_path)
    assert [(p.line, p.path, p.message) for p in problems] == [
        (line_of(text, "too_many: invalid_arg"), "decode_errors.too_many",
         "unknown error code 'invalid_arg'"),
        (line_of(text, "pattern:"), "types[0].fields[0].pattern",
         "bad regular expression: unterminated character set at position 1"),
        (line_of(text, "senders: [servr]"), "messages[0].senders[0]", "unknown sender 'servr'"),
        (line_of(text, "type: Callr"), "messages[0].fields[0].type", "unknown type 'Callr'"),
        (line_of(text, "max_bytes: max_line_bytes"), "messages[1].fields[0].max_bytes",
         "unknown constant 'max_line_bytes'"),
        (line_of(text, "fields: [text, sml]"), "messages[1].rules[0].fields[1]",
         "no field 'sml' here"),
        (line_of(text, "{type: hang_up}"), "messages[2].examples[0].json.type",
         "example of hangup has type 'hang_up'"),
        (line_of(text, "    size: 13"), "frames[0].size", "the fields add up to 12 bytes, not 13"),
    ]  # fmt: skip
    assert all(p.file == DISPLAY for p in problems)


# -- files that cannot be read ---------------------------------------------------------------------


def test_a_missing_file_is_one_clear_problem(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load(tmp_path / "absent.yaml", DISPLAY)
    assert caught.value.problems == [
        Problem(DISPLAY, 1, "", "cannot read the spec: No such file or directory")
    ]


def test_a_non_utf8_file_is_one_clear_problem_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(VALID_SPEC.replace("Toy protocol", "Toy protocol café").encode("latin-1"))
    with pytest.raises(SpecError) as caught:
        load(path, DISPLAY)
    line = line_of(VALID_SPEC, "  title: Toy protocol")
    assert caught.value.problems == [
        Problem(DISPLAY, line, "", "not UTF-8: invalid continuation byte (byte 0xe9)")
    ]


@pytest.mark.parametrize("text", ["", "- a\n- b\n"], ids=["empty", "a-list"])
def test_a_spec_that_is_not_a_mapping_is_one_problem(text: str, tmp_path: Path) -> None:
    assert problems_of(text, tmp_path) == [
        Problem(DISPLAY, 1, "", "the spec must be a YAML mapping")
    ]


# -- the pipeline: every spec file -----------------------------------------------------------------


def test_load_protocols_reports_the_problems_of_every_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    broken_schema = edit(VALID_SPEC, "    summary: End the call.\n", "")
    broken_refs = edit(VALID_SPEC, "        type: Caller\n", "        type: Callr\n")
    broken_refs = edit(broken_refs, "    size: 12\n", "    size: 13\n")
    (spec / "alpha.yaml").write_text(broken_schema, encoding="utf-8")
    (spec / "beta.yaml").write_text(broken_refs, encoding="utf-8")
    (spec / "gamma.yaml").write_text(VALID_SPEC, encoding="utf-8")
    (spec / "spec-format.schema.json").write_text("{}", encoding="utf-8")  # not a spec
    with pytest.raises(SpecError) as caught:
        load_protocols(tmp_path)
    assert [(p.file, p.line, p.path, p.message) for p in caught.value.problems] == [
        ("spec/alpha.yaml", line_of(broken_schema, "  - type: hangup"), "messages[2]",
         "'summary' is required"),
        ("spec/beta.yaml", line_of(broken_refs, "type: Callr"), "messages[0].fields[0].type",
         "unknown type 'Callr'"),
        ("spec/beta.yaml", line_of(broken_refs, "    size: 13"), "frames[0].size",
         "the fields add up to 12 bytes, not 13"),
    ]  # fmt: skip


def test_load_protocols_of_valid_files(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "toy.yaml").write_text(VALID_SPEC, encoding="utf-8")
    [protocol] = load_protocols(tmp_path)
    assert protocol.spec_file == "spec/toy.yaml"


def test_an_example_that_breaks_its_message_is_reported_at_its_line(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    text = edit(
        VALID_SPEC,
        'caller: {number: "+4512345678", mood: calm}',
        'caller: {number: "+45 123", mood: sad}',
    )
    text = edit(text, "json: {type: say, id: c1, text: Hello.}", "json: {type: say, id: c1}")
    (spec / "toy.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_protocols(tmp_path)
    found = [(p.line, p.path, p.message) for p in caught.value.problems]
    start, say = line_of(text, "mood: sad"), line_of(text, "json: {type: say, id: c1}")
    assert found == [
        (start, "messages[0].examples[0].json.caller.mood",
         "example breaks call.start: 'sad' is not one of ['calm', 'angry']"),
        (start, "messages[0].examples[0].json.caller.number",
         "example breaks call.start: '+45 123' does not match '^[0-9+]+$'"),
        (say, "messages[1].examples[0].json", "example breaks say: 'text' is a required property"),
        (say, "messages[1].examples[0].json",
         "example breaks say: breaks the rule: A line needs text or ssml."),
    ]  # fmt: skip
