"""Every Python name the generated code uses is decided here, and nowhere else.

Derived names are functions of the spec's names; fixed ones are constants. The renderer and the
Python view (render.py, pymodel.py and its py*.py siblings) take them from here, and templates
print them from here (the Jinja global ``names``) or from a view built here;
tests/test_codegen.py checks that no other codegen module or template spells one.
"""

from __future__ import annotations

import keyword
import re

__all__ = [
    "CLOSE_AFTER",
    "CLOSE_CODE",
    "DECODE",
    "DECODER",
    "ENCODE",
    "END_REASONS",
    "ERROR_CODE",
    "ERROR_DESCRIPTIONS",
    "JSON_SAFE_INTEGER",
    "MESSAGE_BASE",
    "MESSAGE_TYPES",
    "OBJECT_BASE",
    "ON",
    "ON_HOOK",
    "PROTOCOL_ERROR",
    "PROTOCOL_TITLE",
    "PROTOCOL_VERSION",
    "RECOVERABLE",
    "RULES",
    "SENDER",
    "SEND_HOOK",
    "SENT",
    "SPEC_SHA256",
    "STATISTICS",
    "UNKNOWN_MESSAGE",
    "attribute",
    "carried_by",
    "check_function",
    "class_name",
    "constant",
    "default_constant",
    "enum_member",
    "enum_union",
    "enum_values",
    "envelope",
    "expected_argument",
    "field_set_class",
    "field_set_union",
    "flag",
    "frame_functions",
    "frame_header",
    "frame_size",
    "item_variable",
    "machine",
    "machine_actions",
    "machine_inputs",
    "machine_member",
    "machine_states",
    "module_path",
    "plaintext_hosts",
    "raised_by",
    "role_receives",
    "role_sends",
    "rule",
    "send_method",
    "sender_union",
    "state_group",
    "union_types",
]

_WORD = re.compile(r"[A-Za-z0-9]+")
_RESERVED_ATTRIBUTES = frozenset({"type"})  # the tag, readable on every message


def class_name(wire_type: str) -> str:
    """``session.start`` -> ``SessionStart``, ``agent.tool.invoke`` -> ``AgentToolInvoke``."""
    return "".join(word[:1].upper() + word[1:] for word in _WORD.findall(wire_type))


def attribute(wire_name: str) -> str:
    """A field's attribute: the wire name, with ``_`` added to a Python keyword (``from_``)."""
    if keyword.iskeyword(wire_name) or wire_name in _RESERVED_ATTRIBUTES:
        return wire_name + "_"
    return wire_name


def constant(name: str) -> str:
    """``max_line_bytes`` -> ``MAX_LINE_BYTES``."""
    return name.upper()


def enum_member(value: str | int, name: str | None) -> str:
    """``read_only`` -> ``READ_ONLY``; ``turn.user_started`` -> ``TURN_USER_STARTED``."""
    source = name if name is not None else str(value)
    member = "_".join(_WORD.findall(source)).upper()
    return member if member[:1].isalpha() else f"V_{member}"


def field_set_class(field_set: str) -> str:
    """``command`` -> ``CommandFields``: the base class of the messages that carry a field set."""
    return class_name(field_set) + "Fields"


def field_set_union(field_set: str) -> str:
    """``command`` -> ``Command``: the union of the messages that include a field set."""
    return class_name(field_set)


def enum_union(enum_name: str) -> str:
    """``EventType`` -> ``Event``: the union of the messages an enum of message types names."""
    return enum_name.removesuffix("Type")


def union_types(union: str) -> str:
    """``Command`` -> ``COMMAND_TYPES``: the frozenset of a union's wire types."""
    return f"{_snake(union).upper()}_TYPES"


CLOSE_CODE = "CloseCode"
"""The IntEnum of a protocol's WebSocket close codes."""

CLOSE_AFTER = "CLOSE_AFTER"
"""The mapping from an error code to the close code that follows the error at once."""

END_REASONS = "END_REASONS"
"""The mapping from an error code to the end reason of the session it ends."""


def carried_by(carrier: str) -> str:
    """``agent.tool.error`` -> ``CARRIED_BY_AGENT_TOOL_ERROR``: the codes a message carries."""
    return "CARRIED_BY_" + "_".join(_WORD.findall(carrier)).upper()


def raised_by(origin: str) -> str:
    """``protocol`` -> ``RAISED_BY_PROTOCOL``: the codes only that side raises."""
    return f"RAISED_BY_{origin.upper()}"


def role_sends(role: str) -> str:
    """``client`` -> ``ClientSends``: a typed send method per message the role sends."""
    return class_name(role) + "Sends"


def role_receives(role: str) -> str:
    """``client`` -> ``ClientReceives``: the typed ``on()`` of what the role receives."""
    return class_name(role) + "Receives"


def machine(role: str) -> str:
    """``client`` -> ``CLIENT_MACHINE``: a role's session table (``sessions:`` in the spec)."""
    return f"{role.upper()}_MACHINE"


def machine_states(role: str) -> str:
    """``client`` -> ``ClientState``: the enum (or string union) of a role's session states."""
    return class_name(role) + "State"


def machine_inputs(role: str) -> str:
    """``client`` -> ``ClientInput``: what moves a role's session."""
    return class_name(role) + "Input"


def machine_actions(role: str) -> str:
    """``agent`` -> ``AgentAction``: what a role's transitions run on the way."""
    return class_name(role) + "Action"


def machine_member(item_id: str) -> str:
    """``end_undelivered`` -> ``END_UNDELIVERED``: a state, input or action as an enum member."""
    return item_id.upper()


def state_group(role: str, group: str) -> str:
    """(``gateway``, ``windowed``) -> ``GATEWAY_WINDOWED``: a named set of a role's states."""
    return f"{role.upper()}_{group.upper()}"


def send_method(wire_type: str, override: str | None = None) -> str:
    """``agent.input`` -> ``send_agent_input``: a role's typed send of one message; the spec's
    ``send_method`` when it gives one (``image.send``: ``send_image``, not ``send_image_send``)."""
    return override or "send_" + "_".join(_WORD.findall(wire_type)).lower()


STATISTICS = "STATISTICS"
"""The table of what a protocol's per-session statistics read (``statistics:`` in the spec)."""


SEND_HOOK = "_send"
"""The hook every typed send calls: ``_send(kind, fields)``, the adapter's one send path."""

ON_HOOK = "_on"
"""The hook the typed ``on()`` calls once the type is checked: ``_on(message_type, handler)``."""

ON = "on"
"""The typed handler registration of a role."""

SENT = "Sent"
"""The type variable of what a role's send hook returns (None, an awaitable, a result)."""


def sender_union(sender_id: str) -> str:
    """``server`` -> ``ServerMessage``: the union of everything a sender may send."""
    return class_name(sender_id) + "Message"


def envelope(sender_id: str) -> str:
    """``server`` -> ``ServerEnvelope``: the fields every message of a sender carries."""
    return class_name(sender_id) + "Envelope"


def check_function(class_: str) -> str:
    """The generated value check of a message class or nested type."""
    return "check_" + _snake(class_)


def default_constant(class_name: str, attribute_name: str) -> str:
    """``ToolDeclaration``, ``timeout_ms`` -> ``_TOOL_DECLARATION_TIMEOUT_MS``: a shared default."""
    return f"_{_snake(class_name).upper()}_{attribute_name.strip('_').upper()}"


def enum_values(enum_name: str) -> str:
    """The frozenset of a closed enum's values, used by the generated checks."""
    return f"_{_snake(enum_name).upper()}_VALUES"


def frame_size(frame_name: str) -> str:
    """``AudioFrame`` -> ``AUDIO_FRAME_SIZE``: the frame's size in bytes."""
    return f"{_snake(frame_name).upper()}_SIZE"


def frame_header(frame_name: str) -> str:
    """``AudioFrame`` -> ``_AUDIO_FRAME_HEADER``: the prebuilt ``struct.Struct`` of its header."""
    return f"_{_snake(frame_name).upper()}_HEADER"


def frame_layout(frame_name: str) -> str:
    """``AudioFrame`` -> ``_AUDIO_FRAME_LAYOUT``: the prebuilt ``struct.Struct`` of the whole
    frame, header and payload."""
    return f"_{_snake(frame_name).upper()}_LAYOUT"


def frame_refusal(frame_name: str) -> str:
    """``AudioFrame`` -> ``_refuse_audio_frame_header``: raises the error of a bad header."""
    return f"_refuse_{_snake(frame_name)}_header"


def flag(flag_name: str) -> str:
    """``last_of_utterance`` -> ``FLAG_LAST_OF_UTTERANCE``: the mask of a named bit."""
    return f"FLAG_{flag_name.upper()}"


# -- fixed names of the generated modules --------------------------------------------------

MESSAGE_BASE = "Message"
"""messages.py: the base class of every message (tagged by ``type``)."""

OBJECT_BASE = "Object"
"""messages.py: the base class of the nested objects messages carry."""

MESSAGE_TYPES = "MESSAGE_TYPES"
"""messages.py: every message class by its wire type."""

ERRORS_MODULE = "errors"
"""checks.py: the name it imports the protocol's errors module as (a module, so that the
messages may import the checks before errors.py has run to its end)."""

ERROR_CODE = "ErrorCode"
"""errors.py: the StrEnum of the protocol's error codes."""

PROTOCOL_ERROR = "ProtocolError"
"""errors.py: the exception that carries an error code."""

ERROR_DESCRIPTIONS = "ERROR_DESCRIPTIONS"
"""errors.py: what each code means, as the spec says it."""

RECOVERABLE = "RECOVERABLE"
"""errors.py: whether the link stays open after an error with that code."""

# codec.py: its functions, and the Literal type of a sender's id.
DECODE = "decode"
DECODER = "decoder"
ENCODE = "encode"
SENDER = "Sender"

# _api.py: what the package says about the spec it was generated from.
SPEC_SHA256 = "SPEC_SHA256"
PROTOCOL_TITLE = "PROTOCOL_TITLE"
PROTOCOL_VERSION = "PROTOCOL_VERSION"

# -- names the runtime defines and the generated code uses -------------------------------------

UNKNOWN_MESSAGE = "UnknownMessage"
"""``voxwire._codec``: what a type nobody sends decodes to."""

JSON_SAFE_INTEGER = "JSON_SAFE_INTEGER"
"""``voxwire._rules``: the bound of an integer the spec gives no range."""

RULES = frozenset(
    {
        "at_least_one_of",
        "at_most_one_of",
        "exactly_one_of",
        "flat_object",
        "free_form_problem",
        "max_bytes",
        "min_bytes",
        "min_fields",
        "not_blank",
        "requires",
        "unique",
    }
)
"""``voxwire._rules``: the value rules the generated checks call."""


def rule(function: str) -> str:
    """A value rule's function, refused when ``voxwire._rules`` has no such rule."""
    if function not in RULES:
        raise ValueError(f"voxwire._rules has no rule {function!r}")
    return function


# -- derived names, continued ------------------------------------------------------------------


def plaintext_hosts(key: str) -> str:
    """``ipv4`` -> ``PLAINTEXT_IPV4``, ``names`` -> ``PLAINTEXT_HOST_NAMES``: the host rule."""
    return "PLAINTEXT_HOST_NAMES" if key == "names" else f"PLAINTEXT_{key.upper()}"


def frame_functions(frame_name: str, only: bool) -> tuple[str, str]:
    """The decode and encode function of a frame: ``decode_frame`` when it is the protocol's
    only one, else ``decode_audio_frame``."""
    snake = "frame" if only else _snake(frame_name)
    return f"decode_{snake}", f"encode_{snake}"


def expected_argument(field: str) -> str:
    """``direction`` -> ``expected_direction``: a frame decoder's keyword for a field's value."""
    return f"expected_{field}"


def item_variable(attribute_name: str) -> str:
    """``tools`` -> ``tools_item``: the loop variable of a check over an array or map."""
    return f"{attribute_name.rstrip('_')}_item"


def module_path(protocol_id: str, module: str) -> str:
    """Where a generated module lives, relative to ``generated/``."""
    return f"voxwire/{protocol_id}/{module}"


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()
