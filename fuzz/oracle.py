"""The oracle: what every answer of a decoder (and of the encoder behind it) must satisfy.

1. Only the protocol's ``ProtocolError`` escapes, its code one of the protocol's codes.
2. The same bytes get the same verdict as ``bytes``, ``str`` (when they are UTF-8),
   ``bytearray`` and ``memoryview`` (frames: also a strided, a 2-D and a wide view).
3. Every accepted message is written again by ``encode`` (within the size bound) and reads back
   equal: ``decode(encode(m)) == m``, unless its writing is over the bound (a legal text at the
   bound that voxwire writes longer: encode refuses it, spec decision size-counted-as-sent); a
   frame is written back byte for byte.
4. ``encode`` of a message with a strange value (an offset with seconds, an integer no float
   holds, ``msgspec.Raw``, a deep or cyclic list), given to the constructor or assigned after
   it, raises only ``ProtocolError``, or writes what decode reads back and encode writes again
   the same; a value it cannot write faithfully (a ``msgspec.Raw``, a datetime whose UTC offset
   is not whole minutes) it must refuse.
5. No input takes more CPU time than the bound (CPU, not wall-clock time: the machine may be
   shared); memory is bounded by the input sizes (at most a few times the size bound) and the
   run's peak is reported.
"""

from __future__ import annotations

import array
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import msgspec

from voxwire._codec import UnknownMessage
from voxwire.errors import ProtocolError

__all__ = ["Finding", "FrameOracle", "MessageOracle", "Outcome", "Verdict", "exception_place"]

Verdict = tuple[Any, ...]
"""("accepted", message) or ("refused", code, path, message_type)."""


@dataclass
class Finding:
    """One broken promise: its kind, what happened, and the input that shows it."""

    kind: str
    """``escape``, ``verdict``, ``round-trip``, ``encode`` or ``slow``."""
    detail: str
    data: bytes
    count: int = 1
    shown: bool = False
    """Whether the command line has printed it already."""

    @property
    def signature(self) -> tuple[str, str]:
        """Findings of one kind and cause count as one (a slow input's time is not its cause)."""
        return self.kind, "" if self.kind == "slow" else self.detail[:120]


@dataclass
class Outcome:
    """What one input did: the verdict's label and the findings, if any."""

    label: str
    findings: list[Finding] = field(default_factory=list)


def _cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


STRANGE_VALUES: Final[tuple[Callable[[], Any], ...]] = (
    lambda: None,
    lambda: datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=30))),
    lambda: datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    lambda: datetime(2026, 1, 1),
    lambda: 2**53 + 1,
    lambda: 2**64,
    lambda: -(2**63) - 1,
    lambda: float("nan"),
    lambda: float("inf"),
    lambda: 1e15,
    lambda: msgspec.Raw(b"{"),
    lambda: msgspec.Raw(b"[1]"),
    lambda: msgspec.Raw(b"[" * 5000 + b"]" * 5000),
    lambda: _deep(127),
    lambda: _deep(128),
    lambda: _deep(5000),
    _cyclic,
    lambda: (1, 2),
    lambda: {1, 2},
    lambda: b"bytes",
    lambda: object(),
    lambda: "\ud800",
    lambda: "x" * 70000,
    lambda: {"k": [1, {"j": None}]},
    lambda: {1: "int key"},
    lambda: True,
    lambda: "",
)


class MessageOracle:
    """Judges one sender's decoder of one protocol, and the protocol's encoder."""

    def __init__(self, module: Any, sender: str, time_bound: float, rng: random.Random) -> None:
        self._decode = module.decoder(sender)
        self._encode = module.encode
        self._codes = frozenset(code.value for code in module.ErrorCode)
        self._limit = module.MAX_MESSAGE_BYTES
        self._time_bound = time_bound
        self._rng = rng

    def __call__(self, data: bytes) -> Outcome:
        started = time.process_time()
        findings: list[Finding] = []
        variants: list[tuple[str, Any]] = [("bytes", data)]
        with contextlib.suppress(UnicodeDecodeError):  # a str is always text
            variants.append(("str", data.decode("utf-8")))
        variants += [("bytearray", bytearray(data)), ("memoryview", memoryview(data))]
        verdicts = [(name, self._verdict(value, data, findings)) for name, value in variants]
        first = _one_verdict(verdicts, data, findings)
        if first[0] == "accepted":
            self._round_trip(first[1], data, findings)
            if self._rng.random() < 0.25:
                self._strange_encode(first[1], data, findings)
        elapsed = time.process_time() - started
        if elapsed > self._time_bound:
            findings.append(
                Finding("slow", f"{elapsed:.2f} s of CPU, bound {self._time_bound} s", data)
            )
        label = "accepted" if first[0] == "accepted" else str(first[1])
        return Outcome(label, findings)

    def _verdict(self, value: Any, data: bytes, findings: list[Finding]) -> Verdict:
        try:
            message = self._decode(value)
        except ProtocolError as exc:
            if exc.code not in self._codes:
                findings.append(Finding("escape", f"code {exc.code!r} is not the protocol's", data))
            return ("refused", exc.code, exc.path, exc.message_type)
        except Exception as exc:
            findings.append(Finding("escape", f"decode: {exception_place(exc)}", data))
            return ("escaped", type(exc).__name__)
        return ("accepted", message)

    def _round_trip(self, message: Any, data: bytes, findings: list[Finding]) -> None:
        try:
            written = self._encode(message)
        except ProtocolError as exc:
            payload = message.data if isinstance(message, UnknownMessage) else message
            if len(msgspec.json.encode(payload)) > self._limit:
                return  # a legal text voxwire writes over the bound: encode refuses it
            findings.append(
                Finding("round-trip", f"encode refused an accepted message: {exc}", data)
            )
            return
        except Exception as exc:
            findings.append(Finding("escape", f"encode: {exception_place(exc)}", data))
            return
        if len(written) > self._limit:
            findings.append(Finding("round-trip", f"encode wrote {len(written)} bytes", data))
        try:
            again = self._decode(written)
        except Exception as exc:
            findings.append(Finding("round-trip", f"decode(encode(m)) raised {exc!r}", data))
            return
        if again != message:
            findings.append(Finding("round-trip", "decode(encode(m)) != m", data))

    def _strange_encode(self, message: Any, data: bytes, findings: list[Finding]) -> None:
        fields = [f.name for f in msgspec.structs.fields(message)]
        if not fields:
            return
        name = self._rng.choice(fields)
        value = self._rng.choice(STRANGE_VALUES)()
        after = self._rng.random() < 0.5  # assigned to a built message: its check never saw it
        try:  # a message runs its checks when it is built: the constructor may refuse it
            if after:
                strange = msgspec.structs.replace(message)
                msgspec.structs.force_setattr(strange, name, value)
            else:
                strange = msgspec.structs.replace(message, **{name: value})
            written = self._encode(strange)
        except ProtocolError as exc:
            if exc.code not in self._codes:
                findings.append(Finding("escape", f"encode: code {exc.code!r}", data))
            return
        except Exception as exc:
            findings.append(
                Finding("escape", f"encode of {name}={_short(value)}: {exception_place(exc)}", data)
            )
            return
        if _unfaithful(value):
            findings.append(Finding("encode", f"{name}={_short(value)} was written", data))
            return
        try:
            again = self._encode(self._decode(written))
        except Exception as exc:
            findings.append(
                Finding(
                    "encode", f"{name}={_short(value)} was written, not read back: {exc!r}", data
                )
            )
            return
        if again != written:
            findings.append(
                Finding("encode", f"{name}={_short(value)} reads back as another", data)
            )


class FrameOracle:
    """Judges a binary frame decoder and its encoder."""

    def __init__(self, module: Any, time_bound: float, rng: random.Random) -> None:
        self._decode = module.decode_frame
        self._encode = module.encode_frame
        self._frame = module.AudioFrame
        self._codes = frozenset(code.value for code in module.ErrorCode)
        self._time_bound = time_bound
        self._rng = rng

    def __call__(self, data: bytes) -> Outcome:
        started = time.process_time()
        findings: list[Finding] = []
        verdicts = [(name, self._verdict(view, data, findings)) for name, view in _views(data)]
        first = _one_verdict(verdicts, data, findings)
        if first[0] == "accepted":
            try:
                written = self._encode(self._decode(data))
            except Exception as exc:
                findings.append(Finding("round-trip", f"encode_frame raised {exc!r}", data))
            else:
                if written != data:
                    findings.append(
                        Finding("round-trip", "encode_frame(decode_frame(b)) != b", data)
                    )
        self._strange_encode(data, findings)
        elapsed = time.process_time() - started
        if elapsed > self._time_bound:
            findings.append(
                Finding("slow", f"{elapsed:.2f} s of CPU, bound {self._time_bound} s", data)
            )
        return Outcome("accepted" if first[0] == "accepted" else str(first[1]), findings)

    def _verdict(self, view: Any, data: bytes, findings: list[Finding]) -> Verdict:
        try:
            frame = self._decode(view)
        except ProtocolError as exc:
            if exc.code not in self._codes:
                findings.append(Finding("escape", f"code {exc.code!r} is not the protocol's", data))
            return ("refused", exc.code, exc.path)
        except Exception as exc:
            findings.append(Finding("escape", f"decode_frame: {exception_place(exc)}", data))
            return ("escaped", type(exc).__name__)
        header = tuple(getattr(frame, f.name) for f in msgspec.structs.fields(frame))[:-1]
        return ("accepted", header, bytes(frame.pcm))

    def _strange_encode(self, data: bytes, findings: list[Finding]) -> None:
        rng = self._rng
        numbers = (0, 1, 2, 7, 8, 255, 256, -1, 2**32, None, True, 1.0, "1")
        pcm = rng.choice(
            (
                bytes(640),
                bytearray(640),
                memoryview(bytes(1280))[::2],
                memoryview(bytes(640)).cast("B", (20, 32)),
                array.array("h", bytes(640)),
                array.array("h", bytes(1280)),
                None,
                "x" * 640,
                [0] * 640,
                bytes(639),
                data[12:],
            )
        )
        fields = {
            "version": rng.choice((1, 1, 1, *numbers)),
            "flags": rng.choice((0, 0, 4, *numbers)),
            "direction": rng.choice((0, 1, *numbers)),
            "frame_seq": rng.choice((0, 2**32 - 1, *numbers)),
            "rtp_timestamp": rng.choice((0, 2**32 - 1, *numbers)),
            "pcm": pcm,
        }
        frame = self._frame(**fields)
        try:
            written = self._encode(frame)
        except ProtocolError as exc:
            if exc.code not in self._codes:
                findings.append(Finding("escape", f"encode_frame: code {exc.code!r}", data))
            return
        except Exception as exc:
            shown = {k: type(v).__name__ for k, v in fields.items()}
            findings.append(
                Finding("escape", f"encode_frame {shown}: {exception_place(exc)}", data)
            )
            return
        try:
            again = self._decode(written)
        except Exception as exc:
            findings.append(
                Finding("encode", f"encode_frame wrote a frame decode refuses: {exc!r}", data)
            )
            return
        if bytes(again.pcm) != memoryview(pcm).tobytes() or again.frame_seq != fields["frame_seq"]:  # type: ignore[arg-type]
            findings.append(Finding("encode", "encode_frame wrote another frame", data))


def _views(data: bytes) -> list[tuple[str, Any]]:
    """The same bytes as every kind of buffer a caller may hold."""
    spread = bytearray(2 * len(data))
    spread[::2] = data
    views: list[tuple[str, Any]] = [
        ("bytes", data),
        ("bytearray", bytearray(data)),
        ("memoryview", memoryview(data)),
        ("strided view", memoryview(spread)[::2]),
    ]
    if len(data) % 2 == 0 and data:
        views += [
            ("2-D view", memoryview(data).cast("B", (2, len(data) // 2))),
            ("int16 view", memoryview(data).cast("h")),
        ]
    return views


def exception_place(exc: BaseException) -> str:
    where = exc.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    place = (
        f" at {where.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{where.tb_lineno}"
        if where
        else ""
    )
    return f"{type(exc).__name__}{place}: {str(exc)[:80]}"


def _unfaithful(value: Any) -> bool:
    """Whether no JSON text says ``value``: encode must refuse it, wherever it is."""
    if isinstance(value, datetime):
        offset = value.utcoffset()
        return offset is not None and bool(offset % timedelta(minutes=1))
    return isinstance(value, msgspec.Raw)


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, list) else f"list of {len(value)}"
    return text if len(text) <= 60 else text[:57] + "..."


def _one_verdict(
    verdicts: list[tuple[str, Verdict]], data: bytes, findings: list[Finding]
) -> Verdict:
    """The verdict on the first input type; a finding for each other type judged otherwise
    (an escape is a finding of its own already)."""
    first_name, first = verdicts[0]
    for name, verdict in verdicts[1:]:
        if verdict != first and verdict[0] != "escaped" and first[0] != "escaped":
            findings.append(
                Finding("verdict", f"{first_name} {_show(first)} but {name} {_show(verdict)}", data)
            )
    return first


def _show(verdict: Verdict) -> str:
    if verdict[0] == "accepted":
        return f"accepted {type(verdict[1]).__name__}"
    return " ".join(map(str, verdict))
