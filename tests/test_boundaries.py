"""Every limit at its boundary pair, and every error code decoding can produce, for both protocols."""

from __future__ import annotations

import json
from typing import Any

import pytest

from voxwire import brisvox, ovp

ENVELOPE_BRISVOX = {"seq": 7, "t_ms": 1200}
ENVELOPE_OVP = {
    "seq": 3,
    "ts": "2026-05-14T12:34:56.000Z",
    "session_id": "ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0",
}


def wire(**fields: Any) -> bytes:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def brisvox_code(data: bytes | str, sender: str = "agent") -> str | None:
    """The error code decoding raises, or None when the message is valid."""
    try:
        brisvox.decode(data, sender=sender)  # type: ignore[call-overload]
    except brisvox.ProtocolError as exc:
        assert isinstance(exc.code, brisvox.ErrorCode)
        return str(exc.code)
    return None


def ovp_code(data: bytes | str, sender: str = "client") -> str | None:
    try:
        ovp.decode(data, sender=sender)  # type: ignore[call-overload]
    except ovp.ProtocolError as exc:
        assert isinstance(exc.code, ovp.ErrorCode)
        return str(exc.code)
    return None


# -- Brisvox: byte limits are UTF-8 bytes -------------------------------------------------------

E_ACUTE = "é"  # 2 UTF-8 bytes
EURO = "€"  # 3 UTF-8 bytes
CLEF = "𝄞"  # 4 UTF-8 bytes


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("a" * 4096, None),
        ("a" * 4097, "invalid_argument"),
        (E_ACUTE * 2048, None),  # 4096 bytes in 2048 characters
        ("a" + E_ACUTE * 2048, "invalid_argument"),  # 4097 bytes in 2049 characters
        ("a" * 4094 + E_ACUTE, None),
        ("a" * 4095 + E_ACUTE, "invalid_argument"),  # the last character crosses the limit
        ("a" * 4093 + EURO, None),
        ("a" * 4094 + EURO, "invalid_argument"),
        (CLEF * 1024, None),
        (CLEF * 1024 + "a", "invalid_argument"),
        ("", "invalid_argument"),
        (" \t\n ", "invalid_argument"),  # blank
        ("\u3000", "invalid_argument"),  # an ideographic space is blank too
    ],
    ids=lambda v: f"{len(v.encode()) if isinstance(v, str) else v}",
)
def test_say_text_counts_utf8_bytes(text: str, code: str | None) -> None:
    assert brisvox_code(wire(type="say", text=text)) == code
    assert brisvox_code(wire(type="end", say=text)) == code
    accept = wire(type="session.accept", version=1, tools=[], greeting=text)
    assert brisvox_code(accept) == code


@pytest.mark.parametrize(
    ("size", "code"), [(1, None), (64, None), (65, "invalid_argument"), (0, "invalid_argument")]
)
def test_command_id_is_1_to_64_bytes(size: int, code: str | None) -> None:
    assert brisvox_code(wire(type="say", id="x" * size, text="hi")) == code
    if size == 64:  # 32 two-byte characters are 64 bytes; one more ASCII byte is over
        assert brisvox_code(wire(type="say", id=E_ACUTE * 32, text="hi")) is None
        assert (
            brisvox_code(wire(type="say", id=E_ACUTE * 32 + "x", text="hi")) == "invalid_argument"
        )


@pytest.mark.parametrize(("size", "code"), [(512, None), (513, "invalid_argument")])
def test_notes_are_at_most_512_bytes(size: int, code: str | None) -> None:
    assert brisvox_code(wire(type="end", reason="r" * size)) == code
    assert (
        brisvox_code(wire(type="transfer", destination="+15551230002", summary="s" * size)) == code
    )
    assert (
        brisvox_code(wire(type="transfer", destination="+15551230002", reason="r" * size)) == code
    )
    assert brisvox_code(wire(type="end", reason=EURO * 170 + "x" * (size - 510))) == code


@pytest.mark.parametrize(
    ("destination", "code"),
    [
        ("+12345678", None),  # 8 digits
        ("+1234567", "invalid_argument"),  # 7
        ("+123456789012345", None),  # 15
        ("+1234567890123456", "invalid_argument"),  # 16
        ("15551230002", "invalid_argument"),  # no +
        ("+1 555 123 0002", "invalid_argument"),
        ("+15551230002\n", "invalid_argument"),  # $ must not let a final newline through
        ("tel:+15551230002", "invalid_argument"),
        ("+１５５５１２３０００２", "invalid_argument"),  # fullwidth digits are not ASCII digits
    ],
)
def test_transfer_destination_is_e164(destination: str, code: str | None) -> None:
    assert brisvox_code(wire(type="transfer", destination=destination)) == code


@pytest.mark.parametrize(("count", "code"), [(32, None), (33, "too_large")])
def test_context_messages_are_at_most_32(count: int, code: str | None) -> None:
    items = [{"role": "user", "text": f"line {i}"} for i in range(count)]
    assert brisvox_code(wire(type="context.update", append=items)) == code
    assert brisvox_code(wire(type="session.accept", version=1, tools=[], context=items)) == code


@pytest.mark.parametrize(("count", "code"), [(64, None), (65, "too_large")])
def test_tools_are_at_most_64(count: int, code: str | None) -> None:
    tools = [
        {
            "name": f"tool_{i}",
            "description": "A tool.",
            "parameters": {"type": "object"},
            "kind": "read_only",
        }
        for i in range(count)
    ]
    assert brisvox_code(wire(type="session.accept", version=1, tools=tools)) == code


def test_tool_names_are_unique_and_well_formed() -> None:
    tool = {
        "name": "lookup",
        "description": "Look up.",
        "parameters": {"type": "object"},
        "kind": "read_only",
    }
    assert (
        brisvox_code(wire(type="session.accept", version=1, tools=[tool, tool]))
        == "invalid_argument"
    )
    for name, code in (
        ("a" * 64, None),
        ("a" * 65, "invalid_argument"),
        ("bad name", "invalid_argument"),
    ):
        assert (
            brisvox_code(wire(type="session.accept", version=1, tools=[{**tool, "name": name}]))
            == code
        )
    confirm_on_read_only = {**tool, "confirm": True}
    assert (
        brisvox_code(wire(type="session.accept", version=1, tools=[confirm_on_read_only]))
        == "invalid_argument"
    )


def pad_to(size: int, build: Any) -> bytes:
    """A message of exactly ``size`` bytes: ``build(padding)`` with an unknown field grown to fit."""
    empty = build("")
    data = build("x" * (size - len(empty)))
    assert len(data) == size
    return data


@pytest.mark.parametrize(("size", "code"), [(65536, None), (65537, "too_large")])
def test_messages_are_at_most_64_kib_either_way(size: int, code: str | None) -> None:
    agent = pad_to(size, lambda pad: wire(type="say", text="hi", pad=pad))
    assert brisvox_code(agent) == code
    assert brisvox_code(agent.decode()) == code  # a str counts its UTF-8 bytes too
    server = pad_to(
        size, lambda pad: wire(type="bot.text", **ENVELOPE_BRISVOX, epoch=1, text="x", pad=pad)
    )
    assert brisvox_code(server, sender="server") == code


def test_a_str_message_counts_utf8_bytes_not_characters() -> None:
    base = wire(type="say", text="hi", pad="").decode()
    pad = EURO * ((65536 - len(base)) // 3)
    text = wire(type="say", text="hi", pad=pad).decode()
    assert len(text.encode()) <= 65536 < len(text) * 3
    assert brisvox_code(text) is None
    assert brisvox_code(wire(type="say", text="hi", pad=pad + EURO).decode()) == "too_large"


@pytest.mark.parametrize("pad_char", ["x", CLEF])
def test_a_str_at_and_past_a_quarter_of_the_bound_gets_one_answer(pad_char: str) -> None:
    # decode sends a str of at most a quarter of the bound (in characters) straight to msgspec
    # (at 4 UTF-8 bytes a character it cannot be over the bound); one character more takes the
    # path that measures it. Both answer as the bytes of the same message do.
    quarter = brisvox.MAX_MESSAGE_BYTES // 4
    base = wire(type="say", text="hi", pad="").decode()
    for size in (quarter, quarter + 1):
        text = wire(type="say", text="hi", pad=pad_char * (size - len(base))).decode()
        assert len(text) == size
        message = brisvox.decode(text, sender="agent")
        assert message == brisvox.decode(text.encode(), sender="agent")
        assert message.type == "say" and message.text == "hi"


@pytest.mark.parametrize(
    ("data", "sender", "code"),
    [
        (b"not json", "agent", "bad_message"),
        (b"[1, 2]", "agent", "bad_message"),
        (b'{"text": "hi"}', "agent", "bad_message"),  # no type
        (b'{"type": 5}', "agent", "bad_message"),
        (b'{"type": "say"}', "agent", "bad_message"),  # missing text
        (b'{"type": "say", "text": 5}', "agent", "bad_message"),
        (
            b'{"type": "say", "text": "hi", "re": true}',
            "agent",
            "bad_message",
        ),  # bool is no integer
        (b'{"type": "say", "text": "hi", "re": 1.0}', "agent", "bad_message"),  # nor is 1.0
        (b'{"type": "say", "text": "hi", "re": 1e400}', "agent", "bad_message"),
        (b'{"type": "say", "text": "hi", "re": NaN}', "agent", "bad_message"),
        (b'{"type": "say", "text": "hi", "re": 9007199254740992}', "agent", "invalid_argument"),
        (b'{"type": "say", "text": "\\ud800"}', "agent", "bad_message"),  # lone surrogate
        (b'{"type": "say", "text": "\xff"}', "agent", "bad_message"),  # not UTF-8
        (b'{"type": "dance"}', "agent", "unknown_type"),
        (
            b'{"type": "bot.text", "seq": 1, "t_ms": 0, "epoch": 1, "text": "x"}',
            "agent",
            "unknown_type",
        ),
        (
            b'{"type": "say", "text": "hi"}',
            "server",
            "unknown_type",
        ),  # agents send say, not servers
        (
            b'{"type": "transfer", "destination": "+15551230002", "mode": "hot"}',
            "agent",
            "invalid_argument",
        ),
        (
            b'{"type": "context.update", "append": [{"role": "robot", "text": "x"}]}',
            "agent",
            "invalid_argument",
        ),
        (b'{"type": "say", "text": "x", "type": "end"}', "agent", "bad_message"),  # two types
        (
            b'{"type": "bot.text", "seq": 0, "t_ms": 0, "epoch": 1, "text": "x"}',
            "server",
            "invalid_argument",
        ),
    ],
)
def test_every_brisvox_decode_error_code(data: bytes, sender: str, code: str) -> None:
    assert brisvox_code(data, sender) == code


def test_an_unknown_server_type_is_kept_and_encodes_back() -> None:
    data = b'{"type":"bot.thought","seq":9,"t_ms":5,"text":"hmm"}'
    message = brisvox.decode(data, sender="server")
    assert isinstance(message, brisvox.UnknownMessage)
    assert message.type == "bot.thought" and message.data["text"] == "hmm"
    assert json.loads(brisvox.encode(message)) == json.loads(data)


def test_error_names_the_path_and_the_rule() -> None:
    items = [
        {"role": "user", "text": "ok"},
        {"role": "user", "text": "a" * 10},
        {"role": "user", "text": "  "},
    ]
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.decode(wire(type="context.update", append=items), sender="agent")
    error = caught.value
    assert (error.code, error.path, error.message_type) == (
        "invalid_argument",
        "$.append[2].text",
        "context.update",
    )
    assert str(error) == "invalid_argument: context.update $.append[2].text: is blank"
    assert isinstance(error, brisvox.ProtocolError) and isinstance(
        error, __import__("voxwire").ProtocolError
    )


# -- Brisvox: encode checks the same rules ------------------------------------------------------


def test_encode_checks_every_rule() -> None:
    with pytest.raises(brisvox.ProtocolError, match=r"\$\.text: 4097 UTF-8 bytes"):
        brisvox.encode(brisvox.Say(text="a" * 4097))
    with pytest.raises(
        brisvox.ProtocolError, match=r"\$\.destination: Expected `str` matching regex"
    ):
        brisvox.encode(brisvox.Transfer(destination="+1234567"))
    with pytest.raises(
        brisvox.ProtocolError, match=r"\$\.append: Expected `array` of length <= 32"
    ) as caught:
        brisvox.encode(
            brisvox.ContextUpdate(append=[brisvox.ContextMessage(role="user", text="x")] * 33)
        )
    assert caught.value.code == "too_large"
    with pytest.raises(brisvox.ProtocolError, match=r"\$\.mode: Invalid enum value 'hot'"):
        brisvox.encode(brisvox.Transfer(destination="+15551230002", mode="hot"))  # type: ignore[arg-type]
    with pytest.raises(brisvox.ProtocolError, match=r"\$\.result\.score: nan is not a JSON number"):
        brisvox.encode(brisvox.ToolResult(id=1, result={"score": float("nan")}))
    with pytest.raises(brisvox.ProtocolError, match="lone surrogate"):
        brisvox.encode(brisvox.Say(text="\ud800"))
    with pytest.raises(TypeError, match="not a brisvox message"):
        brisvox.encode(ovp.AgentCancel(seq=1, ts="2026-05-14T12:34:56Z", session_id="s"))  # type: ignore[arg-type]
    big = brisvox.ContextUpdate(system_prompt="x" * 65500)
    with pytest.raises(brisvox.ProtocolError, match="bytes encoded, at most 65536") as caught:
        brisvox.encode(big)
    assert caught.value.code == "too_large"


# -- OVP ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "code"), [(65536, None), (65537, "OVP_EVENT_SCHEMA_INVALID")])
def test_ovp_messages_are_at_most_64_kib(size: int, code: str | None) -> None:
    data = pad_to(size, lambda pad: wire(type="agent.cancel", **ENVELOPE_OVP, pad=pad))
    assert ovp_code(data) == code


@pytest.mark.parametrize(
    ("data", "sender", "code"),
    [
        (b"{", "client", "OVP_EVENT_SCHEMA_INVALID"),
        (
            wire(type="agent.cancel", seq=1, ts="2026-05-14T12:34:56Z"),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "seq": -1}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "seq": 1.0}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "ts": "2026-05-14 12:34:56"}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "ts": "2026-05-14T12:34:56+00:00"}),
            "client",
            None,  # an offset names the instant too (decision ts-rfc3339)
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "ts": "2026-02-30T12:34:56Z"}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",  # not on the calendar
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "ts": "2026-05-14T12:34:56"}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",  # no zone
        ),
        (
            wire(type="agent.cancel", **{**ENVELOPE_OVP, "ts": "2026-05-14T12:34:56Z\n"}),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
        (wire(type="agent.teleport", **ENVELOPE_OVP), "client", "OVP_EVENT_SCHEMA_INVALID"),
        (wire(type="transcript.final", **ENVELOPE_OVP), "client", "OVP_EVENT_DIRECTION_VIOLATION"),
        (wire(type="session.update", **ENVELOPE_OVP), "server", "OVP_EVENT_DIRECTION_VIOLATION"),
        (
            wire(type="session.update", **ENVELOPE_OVP, patch={}),
            "client",
            "OVP_SESSION_UPDATE_REJECTED",
        ),
        (
            wire(type="session.update", **ENVELOPE_OVP, patch={"agent_id": "x"}),
            "client",
            "OVP_SESSION_UPDATE_REJECTED",
        ),
        (wire(type="session.update", **ENVELOPE_OVP, patch={"language": "es-ES"}), "client", None),
        (wire(type="dtmf.send", **ENVELOPE_OVP, digits="12#"), "client", None),
        (
            wire(type="dtmf.send", **ENVELOPE_OVP, digits="12x"),
            "client",
            "OVP_EVENT_SCHEMA_INVALID",
        ),
    ],
)
def test_every_ovp_decode_error_code(data: bytes, sender: str, code: str | None) -> None:
    assert ovp_code(data, sender) == code


def test_direction_is_judged_on_type_before_the_body() -> None:
    # The wrong direction AND a broken body: reported as a direction violation.
    data = wire(type="transcript.final", seq="not a number")
    assert ovp_code(data, "client") == "OVP_EVENT_DIRECTION_VIOLATION"


def test_an_unknown_server_event_is_kept() -> None:
    message = ovp.decode(wire(type="agent.mood", **ENVELOPE_OVP, mood="calm"), sender="server")
    assert isinstance(message, ovp.UnknownMessage) and message.type == "agent.mood"


FRAME = (
    bytes([1, 0, 0, 0])
    + (5).to_bytes(4, "little")
    + (800).to_bytes(4, "little")
    + bytes(range(256)) * 2
    + bytes(128)
)


@pytest.mark.parametrize(
    ("size", "ok"), [(651, False), (652, True), (653, False), (0, False), (12, False)]
)
def test_frames_are_exactly_652_bytes(size: int, ok: bool) -> None:
    buf = (FRAME + b"\x00")[:size]
    if ok:
        frame = ovp.decode_frame(buf)
        assert (frame.version, frame.direction, frame.frame_seq, frame.rtp_timestamp) == (
            1,
            0,
            5,
            800,
        )
        assert ovp.encode_frame(frame) == buf
    else:
        with pytest.raises(ovp.ProtocolError) as caught:
            ovp.decode_frame(buf)
        assert caught.value.code == "OVP_AUDIO_FRAME_INVALID"
        assert f"{size} bytes" in str(caught.value)


@pytest.mark.parametrize(
    ("offset", "value", "reason"),
    [
        (0, 2, "version is 2"),
        (1, 0x08, "reserved bits"),
        (2, 2, "direction 2"),
        (3, 1, "direction 256"),
    ],
)
def test_frame_header_is_checked(offset: int, value: int, reason: str) -> None:
    buf = bytearray(FRAME)
    buf[offset] = value
    with pytest.raises(ovp.ProtocolError, match=reason) as caught:
        ovp.decode_frame(bytes(buf))
    assert caught.value.code == "OVP_AUDIO_FRAME_INVALID"


def test_every_value_of_the_checked_header_bytes_gets_the_rules_verdict() -> None:
    # decode_frame tests the header values it reads with one comparison each (flags > 0x07,
    # direction > 1: they are never negative); the rules as written: version 1, no reserved
    # bit, a direction of the enum. Every value of each checked byte, the others valid.
    directions = {int(d) for d in ovp.FrameDirection}
    for offset in (0, 1, 2, 3):
        for value in range(256):
            buf = bytearray(FRAME)
            buf[offset] = value
            version, flags, direction = buf[0], buf[1], int.from_bytes(buf[2:4], "little")
            valid = version == 1 and not flags & ~0x07 and direction in directions
            try:
                frame = ovp.decode_frame(bytes(buf))
            except ovp.ProtocolError:
                assert not valid, (offset, value)
            else:
                assert valid, (offset, value)
                assert ovp.encode_frame(frame) == bytes(buf)


def test_frame_flags_direction_and_a_payload_of_its_own() -> None:
    buf = bytearray(FRAME)
    buf[1] = ovp.FLAG_SILENCE | ovp.FLAG_LAST_OF_UTTERANCE
    buf[2] = 1
    buf[12] = 0xAB
    frame = ovp.decode_frame(buf, expected_direction=ovp.FrameDirection.SERVER_TO_CLIENT)
    assert frame.silence and frame.last_of_utterance and not frame.dtmf_overlay
    assert type(frame.pcm) is bytes and frame.pcm == bytes(
        buf[12:]
    )  # decision frame-payload-copied
    buf[12] = 0xCD  # a receive buffer used again leaves the frame as it was read
    assert frame.pcm[0] == 0xAB
    with pytest.raises(ovp.ProtocolError, match="expected 0"):
        ovp.decode_frame(buf, expected_direction=ovp.FrameDirection.CLIENT_TO_SERVER)


def test_encode_frame_checks_the_header_and_payload() -> None:
    good = dict(direction=0, frame_seq=1, rtp_timestamp=2, pcm=bytes(640))
    assert len(ovp.encode_frame(ovp.AudioFrame(**good))) == 652  # type: ignore[arg-type]
    for change, reason in (
        ({"pcm": bytes(639)}, "pcm is 639 bytes"),
        ({"frame_seq": 2**32}, "out of range"),
        ({"flags": 0x10}, "reserved bits"),
        ({"direction": 3}, "direction 3"),
        ({"version": 0}, "version is 0"),
    ):
        with pytest.raises(ovp.ProtocolError, match=reason):
            ovp.encode_frame(ovp.AudioFrame(**{**good, **change}))  # type: ignore[arg-type]
