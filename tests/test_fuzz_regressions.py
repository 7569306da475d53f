"""Every input class of issue 19 (found by fuzzing), each a test that fails on the old codec.

Each decode case is judged as bytes, str, bytearray and memoryview: one verdict, and only the
protocol's ProtocolError.
"""

from __future__ import annotations

import array
import json
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
import msgspec
import pytest

from voxwire import brisvox, ovp
from voxwire.errors import ProtocolError

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS: dict[str, Any] = {"brisvox": brisvox, "ovp": ovp}
OVP_EVENT = (
    '{"type":"agent.thinking","seq":1,"ts":"2026-05-14T12:34:56Z","session_id":"s",'
    '"turn_id":"t","delta":"x"}'
)


def verdicts(protocol: Any, text: str | bytes, sender: str) -> list[tuple[Any, ...]]:
    """The answer for each input type; an exception other than ProtocolError fails the test."""
    raw = text.encode() if isinstance(text, str) else text
    answers: list[tuple[Any, ...]] = []
    for data in (raw, raw.decode("utf-8", "replace"), bytearray(raw), memoryview(raw)):
        try:
            message = protocol.decode(data, sender=sender)
        except ProtocolError as exc:
            answers.append(("refused", exc.code, exc.path))
        else:
            answers.append(("accepted", message))
    return answers


def one_refusal(protocol: Any, text: str | bytes, sender: str) -> tuple[Any, ...]:
    answers = verdicts(protocol, text, sender)
    assert all(a == answers[0] for a in answers), answers
    assert answers[0][0] == "refused", answers[0]
    return answers[0]


# --- 1. a repeated type of another JSON type, after another error ---------------------------------


@pytest.mark.parametrize(
    ("protocol_id", "sender", "text"),
    [
        ("brisvox", "agent", '{"type":"say","text":5,"type":5}'),
        ("ovp", "server", '{"type":"agent.output","":6,"session_id":"","":"","type":5}'),
        ("ovp", "server", '{"seq":"","type":"session.end","type":null}'),
        ("brisvox", "agent", '{"type":"say","text":5,"type":' + "9" * 400 + "}"),
        ("ovp", "client", '{"type":"agent.input","seq":"","type":1e999}'),
    ],
)
def test_a_repeated_type_after_another_error_is_malformed(
    protocol_id: str, sender: str, text: str
) -> None:
    protocol = PROTOCOLS[protocol_id]
    _, code, path = one_refusal(protocol, text, sender)
    assert code == protocol.codec._CODEC._codes.malformed
    assert path == "$.type"


# --- 2. a repeated type holding an array or an object ---------------------------------------------


@pytest.mark.parametrize("repeat", ["[]", "{}", '["a"]', '{"a":1}'])
@pytest.mark.parametrize(
    ("protocol_id", "sender"), [("brisvox", "server"), ("brisvox", "agent"), ("ovp", "client")]
)
def test_a_repeated_type_holding_a_container_is_malformed(
    protocol_id: str, sender: str, repeat: str
) -> None:
    protocol = PROTOCOLS[protocol_id]
    for first in ('""', '"x"', '"x.unknown"'):
        _, code, path = one_refusal(
            protocol, '{"type":' + first + ',"type":' + repeat + "}", sender
        )
        assert (code, path) == (protocol.codec._CODEC._codes.malformed, "$.type")


# --- 3. nesting near the recursion limit ----------------------------------------------------------


@pytest.mark.parametrize("depth", [126, 127, 128, 500, 990, 1000, 5000])
@pytest.mark.parametrize("early_error", [False, True])
def test_deep_nesting_gets_one_verdict_and_no_recursion_error(
    depth: int, early_error: bool
) -> None:
    text = "5" if early_error else '"ok"'
    deep = "[" * depth + "]" * depth
    for protocol, sender, head in (
        (brisvox, "agent", '{"type":"tool.result","id":1,"result":'),
        (brisvox, "server", '{"type":"x.unknown","seq":1,"t_ms":0,"pad":'),
        (ovp, "client", '{"type":"agent.input","text":' + text + ',"pad":'),
    ):
        answers = verdicts(protocol, head + deep + "}", sender)
        assert all(a == answers[0] for a in answers), answers


def test_a_free_form_value_deeper_than_the_bound_is_refused_by_its_path() -> None:
    bound = brisvox.MAX_NESTING_DEPTH
    head = '{"type":"tool.result","id":1,"result":'
    fits = head + "[" * (bound - 1) + "]" * (bound - 1) + "}"
    assert verdicts(brisvox, fits, "agent")[0][0] == "accepted"
    _, code, path = one_refusal(brisvox, head + "[" * bound + "]" * bound + "}", "agent")
    assert code == brisvox.ErrorCode.BAD_MESSAGE
    assert path == "$.result" + "[0]" * (bound - 1)  # the message is level 1


# --- 4. encode of a deep value --------------------------------------------------------------------


@pytest.mark.parametrize("depth", [126, 127, 128, 1000, 100_000])
def test_a_deep_value_is_refused_with_protocol_error_where_the_message_is_built(
    depth: int,
) -> None:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    if depth + 2 <= brisvox.MAX_NESTING_DEPTH:  # the message and the innermost list count too
        message = brisvox.ToolResult(id=1, result=value)
        assert brisvox.decode(brisvox.encode(message), sender="agent") == message
        return
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.ToolResult(id=1, result=value)  # the message's check runs as it is built
    assert "nested deeper than" in caught.value.detail
    assert caught.value.path == "$.result" + "[0]" * (brisvox.MAX_NESTING_DEPTH - 1)


def test_a_value_made_deep_after_it_was_built_is_refused_by_encode() -> None:
    message = brisvox.ToolResult(id=1, result=[])
    value: list[Any] = []
    for _ in range(brisvox.MAX_NESTING_DEPTH):
        value = [value]
    message.result = value  # a Struct's fields can be set: encode checks again, reading back
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(message)
    assert "nested deeper than" in caught.value.detail


def test_encode_of_a_cyclic_value_raises_protocol_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(brisvox.ProtocolError):
        brisvox.encode(brisvox.ToolResult(id=1, result=loop))


def test_what_decode_accepts_at_the_depth_bound_encode_writes() -> None:
    bound = ovp.MAX_NESTING_DEPTH
    event = json.loads(OVP_EVENT)
    event.update(type="agent.tool.result", tool_call_id="c", duration_ms=1)
    del event["delta"]
    text = json.dumps(event)[:-1] + ',"result":' + "[" * (bound - 1) + "]" * (bound - 1) + "}"
    message = ovp.decode(text, sender="server")
    assert ovp.decode(ovp.encode(message), sender="server") == message


# --- 5. the size bound, both ways -----------------------------------------------------------------


def _ovp_at(size: int, filler: str) -> str:
    """An OVP event of ``size`` bytes whose pad field holds ``filler`` repeated."""
    head = OVP_EVENT[:-1] + ',"pad":['
    count = (size - len(head) - 2) // (len(filler) + 1) + 1
    text = head + ",".join([filler] * count) + "]}"
    while len(text) > size:
        count -= 1
        text = head + ",".join([filler] * count) + "]}"
    return text[:-2] + "]" + " " * (size - len(text)) + "}"


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_the_size_bound_counts_the_text_received(delta: int) -> None:
    limit = ovp.MAX_MESSAGE_BYTES
    text = _ovp_at(limit + delta, "1")
    assert len(text.encode()) == limit + delta
    answers = verdicts(ovp, text, "server")
    assert all(a == answers[0] for a in answers)
    assert (answers[0][0] == "accepted") == (delta <= 0)


def test_a_text_that_voxwire_would_write_over_the_bound_is_decoded_and_not_encoded() -> None:
    """1e15 is read in 4 bytes and written in 18: the received text fits, the writing would not.
    The bound is counted on the text as sent (spec: size-counted-as-sent), so decode accepts the
    legal message, as every input type, and encode refuses to write it over the bound."""
    limit = brisvox.MAX_MESSAGE_BYTES
    head = '{"type":"tool.result","id":1,"result":['
    count = (limit - len(head) - 2) // 5
    text = head + ",".join(["1e15"] * count) + "]}"
    assert len(text) <= limit
    answers = verdicts(brisvox, text, "agent")
    assert all(a == answers[0] for a in answers) and answers[0][0] == "accepted"
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(brisvox.decode(text, sender="agent"))
    assert caught.value.code == brisvox.ErrorCode.TOO_LARGE


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_encode_and_decode_agree_at_the_bound(delta: int) -> None:
    limit = brisvox.MAX_MESSAGE_BYTES
    base = brisvox.encode(brisvox.ToolResult(id=1, result=""))
    message = brisvox.ToolResult(id=1, result="x" * (limit + delta - len(base)))
    if delta > 0:
        with pytest.raises(brisvox.ProtocolError) as caught:
            brisvox.encode(message)
        assert caught.value.code == brisvox.ErrorCode.TOO_LARGE
        text = base.decode().replace('""', '"' + "x" * (limit + delta - len(base)) + '"')
        assert one_refusal(brisvox, text, "agent")[1] == brisvox.ErrorCode.TOO_LARGE
    else:
        data = brisvox.encode(message)
        assert len(data) == limit + delta
        assert brisvox.decode(data, sender="agent") == message


# --- 6. frames ------------------------------------------------------------------------------------

FRAME = ovp.encode_frame(
    ovp.AudioFrame(direction=0, frame_seq=7, rtp_timestamp=320, pcm=bytes(640))
)


def _spread(data: bytes) -> memoryview:
    wide = bytearray(2 * len(data))
    wide[::2] = data
    return memoryview(wide)[::2]


@pytest.mark.parametrize(
    "view",
    [
        _spread(FRAME),
        memoryview(FRAME).cast("B", (2, 326)),
        memoryview(FRAME).cast("h"),
        array.array("h", FRAME),
        bytearray(FRAME),
    ],
    ids=["strided", "2-D", "int16 view", "array('h')", "bytearray"],
)
def test_decode_frame_reads_any_buffer_as_its_bytes(view: Any) -> None:
    frame = ovp.decode_frame(view)
    assert (frame.frame_seq, frame.rtp_timestamp, bytes(frame.pcm)) == (7, 320, bytes(640))
    assert ovp.encode_frame(frame) == FRAME


@pytest.mark.parametrize("size", [650, 654, 1304])
def test_decode_frame_counts_a_wide_or_strided_view_in_bytes(size: int) -> None:
    """326 int16 items are 652 bytes; a view of 650 or 654 bytes is no frame, whatever its
    item count (the old decoder compared items for a strided view, and 1-D length for 2-D)."""
    data = FRAME[:size] + bytes(max(0, size - len(FRAME)))
    views = (_spread(data), memoryview(data).cast("h"), memoryview(data).cast("B", (2, size // 2)))
    for view in views:
        with pytest.raises(ovp.ProtocolError) as caught:
            ovp.decode_frame(view)
        assert caught.value.path == "frame"
        assert f"{size} bytes" in caught.value.detail


@pytest.mark.parametrize("not_a_buffer", ["x" * 652, None, [0] * 652, 652])
def test_decode_frame_refuses_what_is_no_buffer(not_a_buffer: Any) -> None:
    with pytest.raises(ovp.ProtocolError):
        ovp.decode_frame(not_a_buffer)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flags", None),
        ("version", None),
        ("direction", "0"),
        ("frame_seq", 1.0),
        ("flags", True),
        ("pcm", None),
        ("pcm", "x" * 640),
        ("pcm", [0] * 640),
        ("pcm", array.array("h", [0] * 640)),
    ],
)
def test_encode_frame_refuses_wrong_types_and_counts_bytes(field: str, value: Any) -> None:
    fields: dict[str, Any] = {"direction": 0, "frame_seq": 1, "rtp_timestamp": 2, "pcm": bytes(640)}
    fields[field] = value
    with pytest.raises(ovp.ProtocolError) as caught:
        ovp.encode_frame(ovp.AudioFrame(**fields))
    assert caught.value.path == field


def test_encode_frame_takes_320_int16_samples() -> None:
    samples = array.array("h", range(320))
    frame = ovp.AudioFrame(direction=1, frame_seq=1, rtp_timestamp=2, pcm=samples)
    data = ovp.encode_frame(frame)
    assert len(data) == ovp.AUDIO_FRAME_SIZE
    assert bytes(ovp.decode_frame(data).pcm) == samples.tobytes()


# --- 7. encode never changes a value silently -----------------------------------------------------


@pytest.mark.parametrize(
    "ts",
    [
        datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=30))),
        datetime(1900, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam")),
    ],
)
def test_encode_refuses_an_offset_with_seconds(ts: datetime) -> None:
    message = msgspec.structs.replace(ovp.decode(OVP_EVENT, sender="server"), ts=ts)
    with pytest.raises(ovp.ProtocolError) as caught:
        ovp.encode(message)
    assert caught.value.path == "$.ts"


def test_encode_keeps_an_offset_of_whole_minutes() -> None:
    ts = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30)))
    message = msgspec.structs.replace(ovp.decode(OVP_EVENT, sender="server"), ts=ts)
    assert ovp.decode(ovp.encode(message), sender="server").ts == ts


def test_encode_refuses_an_integer_no_float_holds() -> None:
    metrics = brisvox.Metrics(response_ms=2**53 + 1)  # reads back as 2**53: another number
    message = brisvox.TurnMetrics(seq=1, t_ms=0, epoch=0, metrics=metrics)
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(message)
    assert caught.value.path == "$.metrics.response_ms"
    exact = msgspec.structs.replace(message, metrics=brisvox.Metrics(response_ms=2**53))
    assert brisvox.decode(brisvox.encode(exact), sender="server") == exact


@pytest.mark.parametrize("raw", [b"{", b"[1]", b'{"a":1}'])
def test_encode_refuses_msgspec_raw_by_its_path(raw: bytes) -> None:
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(brisvox.ToolResult(id=1, result={"x": msgspec.Raw(raw)}))
    assert caught.value.path == "$.result.x"


# --- 8. the JSON Schema reads ts as the decoder does ----------------------------------------------


@pytest.mark.parametrize(
    "ts",
    [
        "2026-05-14T12:34:56+0530",
        "2026-05-14T12:34:56+05:30",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59.9999995Z",
        "9999-12-31T23:59:59.9999994Z",
        "9999-12-31T23:59:59.99999949999+01:00",
        "2026-05-14T12:34:56.123456789123Z",
        "2026-05-14t12:34:56z",
    ],
)
def test_the_schema_and_the_decoder_agree_on_ts(ts: str) -> None:
    schema = json.loads((ROOT / "generated" / "voxwire" / "ovp" / "schema.json").read_text())
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/$defs/AgentThinking", "$defs": schema["$defs"]}
    )
    event = json.loads(OVP_EVENT) | {"ts": ts}
    schema_says = validator.is_valid(event)
    try:
        ovp.decode(json.dumps(event), sender="server")
    except ovp.ProtocolError:
        decoder_says = False
    else:
        decoder_says = True
    assert schema_says == decoder_says


# --- found by the 1,000,000-input run after the checks moved into the classes ----------------------


def _deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_rule_across_fields_shows_a_deep_value_of_another_type_bounded() -> None:
    # The check of a rule across fields runs as the message is built and quotes the value it
    # got: a 5,000-deep list in a boolean field once raised RecursionError from its repr.
    result = brisvox.decode(
        '{"type":"command.result","seq":1,"t_ms":0,"id":"c","ok":false,'
        '"error":{"code":"queue_full","message":"8 lines waiting"}}',
        sender="server",
    )
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(msgspec.structs.replace(result, ok=_deep_list(5000)))
    assert "[[[[...]]]]" in caught.value.detail
    share = ovp.decode(
        json.dumps(
            {
                **json.loads(OVP_EVENT),
                "type": "screen.share",
                "action": "start",
                "share_id": "shr_1",
                "url": "https://share.example/v/1",
            }
        ),
        sender="client",
    )
    with pytest.raises(ovp.ProtocolError) as refused:
        msgspec.structs.replace(share, action=_deep_list(5000))
    assert refused.value.path == "$"


# --- issue 28: the error path reads no deeper than the caller's stack allows --------------------


def _at_stack_depth(frames: int, call: Callable[[], Any]) -> Any:
    """``call()`` with the stack ``frames`` frames deep (at least as deep as it is now)."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back

    def down(left: int) -> Any:
        return call() if left <= 0 else down(left - 1)

    return down(frames - depth)


def _answer(protocol: Any, text: str, sender: str) -> tuple[Any, ...]:
    try:
        protocol.decode(text, sender=sender)
    except ProtocolError as exc:
        return (exc.code, exc.path, exc.message_type, exc.detail)
    return ("accepted",)


STACK_DEPTHS = (0, 500, sys.getrecursionlimit() - 150)
DEEP_AFTER_AN_ERROR = [
    # A key repeated: the value decode keeps is shallow, the one it drops (skipped by msgspec)
    # deep, and the type unknown: json re-read the text and raised RecursionError.
    (brisvox, "agent", '{"type":"x.unknown","pad":%s,"pad":1}', "unknown_type", None),
    (brisvox, "server", '{"type":"x.unknown","pad":%s,"pad":1}', "missing_field", "$.seq"),
    (ovp, "client", '{"type":"x.unknown","pad":%s,"pad":1}', "unknown_type", None),
    (ovp, "server", '{"type":"x.unknown","pad":%s,"pad":1}', "missing_field", "$.seq"),
    (brisvox, "server", '{"type":"say","pad":%s,"pad":1}', "wrong_sender", None),
    # A wrong type, then an unknown field msgspec never reached: reading `type` skipped it.
    (brisvox, "agent", '{"type":"say","text":5,"pad":%s}', "wrong_type", "$.text"),
    (ovp, "client", '{"type":"agent.input","text":5,"pad":%s}', "wrong_type", "$.text"),
    # A check refused the message as it was built: the text after it must be JSON too.
    (brisvox, "agent", '{"type":"say","text":" "} %s', "malformed", None),
]


@pytest.mark.parametrize("depth", [490, 700, 990, 5000])
@pytest.mark.parametrize(("protocol", "sender", "template", "code", "path"), DEEP_AFTER_AN_ERROR)
def test_a_deep_skipped_field_after_an_error_gets_one_answer_at_any_stack_depth(
    protocol: Any, sender: str, template: str, code: str, path: str | None, depth: int
) -> None:
    text = template % ("[" * depth + "]" * depth)
    answers = {
        _at_stack_depth(frames, lambda: _answer(protocol, text, sender)) for frames in STACK_DEPTHS
    }
    assert len(answers) == 1, answers
    (answer,) = answers
    codes = protocol.codec._CODEC._codes
    if depth + 1 > protocol.MAX_READ_DEPTH:  # deeper than a text is read: malformed first
        assert answer[:2] == (codes.malformed, None)
        assert f"nested deeper than {protocol.MAX_READ_DEPTH}" in answer[3]
    else:
        assert answer[:2] == (getattr(codes, code), path)


@pytest.mark.parametrize(
    ("tail", "detail"),
    [
        (",}", "not valid JSON"),  # not JSON after the deep value: malformed, as msgspec says
        (',"type":"end"}', "`type` is repeated"),  # a later type that says another
    ],
)
def test_a_deep_text_after_an_error_is_read_in_order_at_any_stack_depth(
    tail: str, detail: str
) -> None:
    depth = brisvox.MAX_READ_DEPTH - 1  # within the read depth: read in order, with room
    text = '{"type":"say","text":5,"pad":' + "[" * depth + "]" * depth + tail
    answers = {
        _at_stack_depth(frames, lambda: _answer(brisvox, text, "agent")) for frames in STACK_DEPTHS
    }
    assert len(answers) == 1, answers
    (answer,) = answers
    assert answer[0] == brisvox.ErrorCode.BAD_MESSAGE
    assert detail in answer[3]


def test_an_unknown_message_deeper_than_the_bound_is_refused_by_the_path_of_its_depth() -> None:
    bound = brisvox.MAX_NESTING_DEPTH
    for depth in (bound, brisvox.MAX_READ_DEPTH - 1):
        text = '{"type":"x.unknown","seq":1,"t_ms":0,"pad":' + "[" * depth + "]" * depth + "}"
        _, code, path = one_refusal(brisvox, text, "server")
        assert (code, path) == (brisvox.ErrorCode.BAD_MESSAGE, "$.pad" + "[0]" * (bound - 1))
    depth = brisvox.MAX_READ_DEPTH  # with its object, one level past the read depth
    text = '{"type":"x.unknown","seq":1,"t_ms":0,"pad":' + "[" * depth + "]" * depth + "}"
    _, code, path = one_refusal(brisvox, text, "server")
    assert (code, path) == (brisvox.ErrorCode.BAD_MESSAGE, None)
    fits = '{"type":"x.unknown","seq":1,"t_ms":0,"pad":' + "[" * (bound - 1) + "]" * (bound - 1)
    assert verdicts(brisvox, fits + "}", "server")[0][0] == "accepted"


def test_a_deep_unknown_message_with_a_number_too_large_is_refused_for_the_number() -> None:
    depth = brisvox.MAX_READ_DEPTH - 1
    text = '{"type":"x.unknown","seq":1e400,"pad":' + "[" * depth + "]" * depth + "}"
    _, code, path = one_refusal(brisvox, text, "server")
    assert (code, path) == (brisvox.ErrorCode.BAD_MESSAGE, None)
    with pytest.raises(brisvox.ProtocolError, match="too large to represent"):
        brisvox.decode(text, sender="server")


# --- issue 28: encode refuses what it cannot write faithfully ----------------------------------


def test_a_deep_raw_assigned_after_construction_is_refused_by_its_path() -> None:
    message = brisvox.ToolResult(id=1, result=[])
    message.result = msgspec.Raw(b"[" * 3000 + b"]" * 3000)  # its check never saw it
    with pytest.raises(brisvox.ProtocolError) as caught:
        _at_stack_depth(0, lambda: brisvox.encode(message))
    assert (caught.value.code, caught.value.path) == (brisvox.ErrorCode.BAD_MESSAGE, "$.result")
    assert "msgspec.Raw" in caught.value.detail


SUB_MINUTE = (
    datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=30))),
    datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=1, microseconds=5))),
    datetime(1900, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam")),  # +00:19:32
)


@pytest.mark.parametrize("when", SUB_MINUTE)
@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("text", lambda when: when, "$.text"),  # a text field: written as text
        ("result", lambda when: when, "$.result"),  # free-form
        ("result", lambda when: {"at": [1, when]}, "$.result.at[1]"),
        (
            "result",
            lambda when: brisvox.ContextMessage(role=brisvox.ContextRole.USER, text=when),
            "$.result.text",
        ),
    ],
)
def test_encode_refuses_a_datetime_with_an_offset_of_seconds_in_text_or_free_form(
    when: datetime, field: str, value: Callable[[datetime], Any], path: str
) -> None:
    message: Any = (
        brisvox.Say(id="s", text="hi") if field == "text" else brisvox.ToolResult(id=1, result=[])
    )
    setattr(message, field, value(when))
    with pytest.raises(brisvox.ProtocolError) as caught:
        brisvox.encode(message)
    assert (caught.value.code, caught.value.path) == (brisvox.ErrorCode.INVALID_ARGUMENT, path)
    assert "another instant" in caught.value.detail


def test_encode_writes_a_datetime_with_whole_minutes_in_free_form_as_its_text() -> None:
    when = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30)))
    message = brisvox.ToolResult(id=1, result={"at": when})
    written = brisvox.decode(brisvox.encode(message), sender="agent")
    assert isinstance(written, brisvox.ToolResult)
    assert written.result == {"at": "2026-01-01T00:00:00-05:30"}
