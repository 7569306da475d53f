"""What every fake records: the messages of the code under test, judged by the fake's own core.

A fake hands a :class:`Watch` to its role as the role's ``record`` option (a
``voxwire.capture.Recorder``), so the watch sees every message of the session both ways, in the
order the fake's role read and wrote them, and the link's changes. It plays them through the
sans-I/O core of the fake's side, as ``voxwire validate`` does
(:data:`voxwire.conformance.sessions.PLAYERS`): each message of the code under test is taken
(:attr:`Watch.sent`, :attr:`Watch.frames`) or refused (:attr:`Watch.refused`, with the
protocol's error code and the core's words), by the rules and in the words the role itself
applies. A fake plays one session at a time (its resumptions included); a second session at
once needs a second fake.

```text
say = await fake.expect(brisvox.Say)          # the next message, of this type, within the wait
await fake.until(lambda: len(fake.frames) >= 50, "50 audio frames")
assert fake.refused == []
```

A wait that ends without what it awaited raises :class:`NothingArrived`, naming what it awaited
and what arrived instead; a message of another type, or one the fake refused, raises
:class:`ExpectationFailed`. Both are ``AssertionError`` s (pytest shows them as failures) and
:class:`~voxwire.errors.VoxwireError` s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from msgspec import UNSET

from voxwire import brisvox, ovp
from voxwire.capture import Recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.conformance.sessions import BROKEN_CODE, PLAYERS, Judged, Player, Step
from voxwire.errors import ProtocolError, VoxwireError

__all__ = [
    "WAIT",
    "Entry",
    "ExpectationFailed",
    "NothingArrived",
    "Refused",
    "Watch",
    "Watching",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

WAIT: float = 5.0
"""Real seconds a fake's wait lasts unless told otherwise (the pytest plugin's
``--voxwire-wait`` changes it for a run)."""

PEER: Final = {
    ("ovp", "gateway"): "client",
    ("ovp", "client"): "server",
    ("brisvox", "agent"): "server",
    ("brisvox", "engine"): "agent",
}
"""The sender name of the code under test, by (protocol, the fake's side)."""

_MODULES: Final[dict[str, Any]] = {"brisvox": brisvox, "ovp": ovp}
_UNJUDGED: Final = Judged({"verdict": "unjudged"})
"""What a message the fake's own fault left unjudged counts as: taken, nobody blamed."""
_RECHECK: Final = 0.05
"""Real seconds :meth:`Watch.until` waits for a message before it tests its condition again."""
_SHOWN: Final = 60
"""Entries of the log a failure text shows at most (the latest)."""


class ExpectationFailed(VoxwireError, AssertionError):
    """The code under test sent something else than the test expected, or something the fake
    refused; the text names both."""


class NothingArrived(ExpectationFailed, TimeoutError):
    """A fake's wait ended without what it awaited; the text names what it awaited and what
    arrived instead."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A message of the code under test the fake's role refused instead of taking it."""

    data: str | bytes
    """The message as it was sent."""
    error: ProtocolError
    """What was wrong with it: ``error.code`` is the protocol's error code, ``error.detail``
    the fake's core's words."""
    after: int
    """How many messages of the code under test that :meth:`Watch.expect` returns had been
    taken before it (its place among :attr:`Watch.expectable`)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of what a fake saw: a message either way, or a change of the link."""

    t: float
    """The fake's clock, in seconds."""
    sender: str | None
    """Who sent it (the protocol's sender name), ``None`` for a change of the link."""
    what: str
    """The message's type and seq, ``audio frame N``, or the link's change."""
    refused: Refused | None = None
    """The refusal, when the fake refused the message."""


class Watch:
    """The recorder a fake gives its role: keeps and judges the session as it passes.

    Args:
        protocol: ``"brisvox"`` or ``"ovp"``.
        side: The fake's side (``"gateway"``, ``"client"``, ``"agent"``, ``"engine"``).
        fake: How failure texts name the fake (``"the fake gateway"``).
        peer: How failure texts name the code under test (``"the client"``).
        expectable: Which taken messages :meth:`expect` returns (the others, a handshake or a
            resumption, are only kept in :attr:`sent`); by default all of them.
        then: A recorder to pass every message and link change on to (a capture).
        clock: The fake's clock (its role's): the times the core judges with.
    """

    def __init__(
        self,
        protocol: str,
        side: str,
        *,
        fake: str,
        peer: str,
        expectable: Callable[[Any], bool] | None = None,
        then: Recorder | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.protocol = protocol
        self.side = side
        self.fake = fake
        self.peer = peer
        self.then = then
        self.clock = clock
        self.sent: list[Any] = []
        """Every message of the code under test the fake took, decoded, in order."""
        self.frames: list[ovp.AudioFrame] = []
        """Every audio frame of the code under test the fake took (OVP), in order."""
        self.refused: list[Refused] = []
        """Every message of the code under test the fake refused, in order."""
        self.log: list[Entry] = []
        """Everything the fake saw, both ways, in its order."""
        self.expectable: list[Any] = []
        """The messages of :attr:`sent` that :meth:`expect` returns, in order."""
        self._sender = PEER[(protocol, side)]  # the code under test's sender name
        self._module = _MODULES[protocol]
        self._expectable = expectable or (lambda _: True)
        self._player: Player | None = None
        self._session: str | None = None
        # A refusal judged before a core could start, until the fake's answer names its code.
        self._provisional: int | None = None
        self._expected = 0  # the index in expectable of the next message expect() returns
        self._reported = 0  # refusals expect() already raised
        self._changed = asyncio.Event()

    # -- the recorder ---------------------------------------------------------------------------

    def record(self, sender: str, data: str | bytes) -> None:
        """A message of ``sender`` passed the fake's role (``voxwire.capture.Recorder``)."""
        if self.then is not None:
            self.then.record(sender, data)
        now = self.clock.now()
        step: Step = {
            "t": now,
            "from": sender,
            "binary" if isinstance(data, bytes) else "text": data,
        }
        self._begins(step)
        if sender != self._sender:
            self._judge(step)
            self._answered(data, sender)
            self.log.append(Entry(now, sender, self._what(data, sender)))
            self.notify()
            return
        judged = self._judge(step)
        refused = self._refusal(judged, data)
        if refused is None:
            self._take(data)
        else:
            self._provisional = len(self.refused) if judged is None else None
            self.refused.append(refused)
        self.log.append(Entry(now, sender, self._what(data, sender), refused))
        self.notify()

    def link(self, event: str) -> None:
        """The session's link changed: ``lost``, ``closed`` or ``open``."""
        if self.then is not None:
            self.then.link(event)
        now = self.clock.now()
        if self._player is not None:
            self._judge({"t": now, "link": event})
        self.log.append(Entry(now, None, f"link {event}"))
        self.notify()

    def forget(self) -> None:
        """The fake's role restarted and knows no session: the next one is judged anew."""
        self._player = self._session = None

    # -- waiting --------------------------------------------------------------------------------

    async def expect(self, kind: type[T], *, timeout: float | None = None) -> T:
        """The next ``kind`` the code under test sends after the messages already expected (the
        ones of other types on the way are passed over; :attr:`sent` keeps them). Raises
        :class:`ExpectationFailed` when the fake refused a message of the code under test
        first, and :class:`NothingArrived`, naming what arrived instead, when no ``kind`` came
        in time."""
        name = getattr(kind, "type", kind.__name__)
        wait = WAIT if timeout is None else timeout
        since, passed = len(self.log), self._expected
        try:
            async with asyncio.timeout(wait):
                while (found := self._next(kind)) is None:
                    await self._changed.wait()
        except TimeoutError:
            over = [_describe(m) for m in self.expectable[passed : self._expected]]
            said = f"passed over {', '.join(over)}; " if over else ""
            raise NothingArrived(
                f"no {name} from {self.peer} within {wait:g} s; {said}"
                f"{self.meanwhile(since, besides=over)}"
            ) from None
        if isinstance(found, Refused):
            self._reported += 1
            raise ExpectationFailed(
                f"expected {name} from {self.peer}; {self.fake} refused what it sent first: "
                f"{found.error} ({_short(found.data)})"
            )
        return found

    async def until(
        self, done: Callable[[], T | None], what: str, *, timeout: float | None = None
    ) -> T:
        """Wait until ``done()`` returns something true (it is called at once and after each
        message or change of the link), and return it. Raises
        :class:`NothingArrived` with ``what`` (what did not happen: "no session.resume from the
        client"), the wait, and what arrived meanwhile."""
        wait = WAIT if timeout is None else timeout
        since = len(self.log)
        try:
            async with asyncio.timeout(wait):
                while not (result := done()):
                    await self._next_change()
        except TimeoutError:
            raise NothingArrived(f"{what} within {wait:g} s; {self.meanwhile(since)}") from None
        return result

    def meanwhile(self, since: int, *, besides: Sequence[str] = ()) -> str:
        """What the fake saw after its ``since``-th entry of :attr:`log`, in a few words (the
        messages of the code under test ``besides`` names aside: said already)."""
        seen = [e for e in self.log[since:] if e.sender != self._sender or e.what not in besides]
        if not seen:
            last = next((e for e in reversed(self.log) if e.sender == self._sender), None)
            before = f" (the last from {self.peer}: {last.what})" if last else ""
            return f"nothing arrived{before}"
        return "arrived instead: " + "; ".join(_runs(seen, self.peer, self._sender, _SHOWN, None))

    def transcript(self, limit: int = _SHOWN) -> str:
        """The latest ``limit`` entries of :attr:`log`, one a line (runs of frames summed)."""
        origin = self.log[0].t if self.log else 0.0
        lines = _runs(self.log, self.peer, self._sender, limit, origin)
        return "\n".join(lines) if lines else "(nothing)"

    def _next(self, kind: type[T]) -> T | Refused | None:
        """The refusal due before the next ``kind``, else that ``kind``, else None; the
        messages of other types on the way are passed over."""
        queue = self.expectable
        while True:
            if self._reported < len(self.refused):
                refused = self.refused[self._reported]
                if refused.after <= self._expected:
                    return refused
            if self._expected >= len(queue):
                return None
            message = queue[self._expected]
            self._expected += 1
            if isinstance(message, kind):
                return message

    async def _next_change(self) -> None:
        """Until the next message or change of the link, or a short while (what ``until``
        tests may change with no message: a session that timed out while its link was down)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_RECHECK):
                await self._changed.wait()

    def notify(self) -> None:
        """Wake the waits: something they test changed (the watch calls it for every message)."""
        self._changed.set()
        self._changed = asyncio.Event()

    # -- judging --------------------------------------------------------------------------------

    def _begins(self, step: Step) -> None:
        """A server's session.start of another session (or, on Brisvox, one that is no
        resumption) begins a new session: a new core judges it."""
        if step.get("from") != "server" or "text" not in step:
            return
        try:
            message = self._module.decode(step["text"], "server")
        except ProtocolError:
            return
        if not isinstance(message, brisvox.SessionStart | ovp.SessionStart):
            return
        other = message.session_id != self._session
        if isinstance(message, brisvox.SessionStart):
            other = other or message.resume in (None, UNSET)
        if self._player is None or other:
            self._player, self._session = None, message.session_id

    def _judge(self, step: Step) -> Judged | None:
        """What the fake's core made of ``step``, or ``None`` before one could start; never
        raises into the role."""
        try:
            if self._player is None:
                if "link" in step:
                    return None
                try:
                    self._player = PLAYERS[(self.protocol, self.side)](step)
                except (ValueError, ProtocolError, KeyError):
                    return None  # not a step to start from: the next one may be
            return self._player.step(step)
        except Exception:  # a fault of the fake's own: it must not blame the code under test
            log.exception("%s could not judge a message", self.fake)
            return _UNJUDGED

    def _refusal(self, judged: Judged | None, data: str | bytes) -> Refused | None:
        if judged is None:  # no core has begun: nothing the fake could take yet
            return Refused(data, self._before_start(data), len(self.expectable))
        if judged.code is None or judged.declined:
            return None
        return Refused(data, self._error(judged.code, judged.why), len(self.expectable))

    def _answered(self, data: str | bytes, sender: str) -> None:
        """The fake answered a message no core could judge yet: its error names the code."""
        if self._provisional is None or isinstance(data, bytes):
            return
        index, self._provisional = self._provisional, None
        try:
            answer = self._module.decode(data, sender)
        except ProtocolError:
            return
        if isinstance(answer, ovp.ErrorEvent | brisvox.SessionReject):
            refused = self.refused[index]
            text = answer.message if isinstance(answer.message, str) else refused.error.detail
            error = self._error(str(answer.code), text)
            self.refused[index] = Refused(refused.data, error, refused.after)

    def _before_start(self, data: str | bytes) -> ProtocolError:
        start, code = self._module.SessionStart.type, BROKEN_CODE[self.protocol]
        if isinstance(data, bytes):
            return self._error(code, f"a binary frame before the {start}")
        try:
            message = self._module.decode(data, self._sender)
        except ProtocolError as exc:
            return exc
        return self._error(code, f"{message.type} before the {start}")

    def _error(self, code: str, detail: str) -> ProtocolError:
        """The protocol's own ``ProtocolError``."""
        error: ProtocolError = self._module.ProtocolError(code, detail or code)
        return error

    def _take(self, data: str | bytes) -> None:
        try:
            if isinstance(data, bytes):
                self.frames.append(ovp.decode_frame(data))
            else:
                message = self._module.decode(data, self._sender)
                self.sent.append(message)
                if self._expectable(message):
                    self.expectable.append(message)
        except ProtocolError:  # taken by the core, refused by the codec: no such message
            log.warning("%s took a message its codec refuses: %s", self.fake, _short(data))

    def _what(self, data: str | bytes, sender: str) -> str:
        if isinstance(data, bytes):
            try:
                return f"audio frame {ovp.decode_frame(data).frame_seq}"
            except ProtocolError:
                return f"a binary frame of {len(data)} bytes"
        try:
            return _describe(self._module.decode(data, sender))
        except ProtocolError as exc:  # its type, when the codec could read that much
            return exc.message_type or _short(data)


def _runs(
    entries: list[Entry], peer: str, sender: str, limit: int, origin: float | None
) -> list[str]:
    """One line an entry, a run of audio frames from one sender summed in one line; each
    stamped with its seconds since ``origin`` (none without one)."""
    lines: list[str] = []
    run: list[Entry] = []

    def at(entry: Entry) -> str:
        return "" if origin is None else f"{entry.t - origin:9.3f} s  "

    def flush() -> None:
        if run:
            who = peer if run[0].sender == sender else "the fake"
            first, last = run[0].what.rsplit(" ", 1)[1], run[-1].what.rsplit(" ", 1)[1]
            frames = (
                f"audio frame {first}"
                if len(run) == 1
                else f"{len(run)} audio frames {first}..{last}"
            )
            lines.append(f"{at(run[0])}{who}: {frames}")
            run.clear()

    for entry in entries:
        if entry.what.startswith("audio frame ") and entry.refused is None:
            if run and run[0].sender != entry.sender:
                flush()
            run.append(entry)
            continue
        flush()
        if entry.sender is None:
            lines.append(f"{at(entry)}{entry.what}")
            continue
        who = peer if entry.sender == sender else "the fake"
        refused = f"  REFUSED {entry.refused.error}" if entry.refused else ""
        lines.append(f"{at(entry)}{who}: {entry.what}{refused}")
    flush()
    return lines[-limit:]


def _describe(message: Any) -> str:
    seq = getattr(message, "seq", None)
    return f"{message.type} seq {seq}" if isinstance(seq, int) else str(message.type)


def _short(data: str | bytes, limit: int = 160) -> str:
    shown = repr(data)
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


class Watching:
    """What every fake shows of its :class:`Watch`, and how long it waits by default.

    The base of :class:`~voxwire.testing.agent.FakeAgent`,
    :class:`~voxwire.testing.gateway.FakeGateway` and
    :class:`~voxwire.testing.client.FakeOVPClient`: each sets :attr:`watch` and :attr:`wait`.
    """

    watch: Watch
    """The fake's recorder: every message and link change, judged by its side's core."""
    wait: float | None
    """How long a wait of the fake lasts when the call names no timeout (``None``: forever)."""

    @property
    def sent(self) -> list[Any]:
        """Every message of the code under test the fake took, in order."""
        return self.watch.sent

    @property
    def refused(self) -> list[Refused]:
        """Every message of the code under test the fake refused, with the protocol's code."""
        return self.watch.refused

    @property
    def log(self) -> list[Entry]:
        """Everything the fake saw, both ways, in order."""
        return self.watch.log

    def transcript(self) -> str:
        """What the fake saw lately, one line each (the plugin shows it when a test fails)."""
        return self.watch.transcript()

    async def until(
        self, done: Callable[[], T | None], what: str, *, timeout: float | None = None
    ) -> T:
        """Wait until ``done()`` holds (see :meth:`Watch.until`)."""
        return await self.watch.until(done, what, timeout=self._wait(timeout))

    def _wait(self, timeout: float | None) -> float | None:
        return self.wait if timeout is None else timeout
