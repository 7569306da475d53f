"""The Brisvox half of ``voxwire demo``: the engine side plays one call to the sample agent.

:class:`~voxwire.brisvox.engine.EngineLink` connects to :class:`~voxwire.demo.luigi.Luigi` on
loopback and plays what a voice engine would: the caller's turn, two tool calls of the LLM, the
bot's answer, a barge-in, and the end the agent asks for. Every message passes through the
link's ``record`` option into the :class:`~voxwire.demo.timeline.Timeline`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, TypeVar

from voxwire import brisvox
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.brisvox.engine_core import CommandReceived, ToolOutcome
from voxwire.brisvox.messages import Event
from voxwire.capture import Record
from voxwire.demo import DemoFailed
from voxwire.demo.luigi import Luigi
from voxwire.demo.timeline import RoundTrip, Timeline
from voxwire.hosts import check_url

__all__ = ["HANDSHAKE", "ROUND_TRIPS", "play"]

C = TypeVar("C", bound=brisvox.Say | brisvox.End)

HANDSHAKE = "connect to session.accept"
"""What the handshake time of the summary spans."""

ROUND_TRIPS = (
    RoundTrip(brisvox.ToolCall.type, brisvox.ToolResult.type, "id", "id"),
    RoundTrip(brisvox.TurnBotEnded.type, brisvox.Say.type, "seq", "re"),
    RoundTrip(brisvox.Say.type, brisvox.CommandResult.type, "id", "id"),
    RoundTrip(brisvox.UserText.type, brisvox.End.type, "seq", "re"),
    RoundTrip(brisvox.End.type, brisvox.CommandResult.type, "id", "id"),
)
"""What the summary measures: tool calls, the agent's reactions to events, command results."""


async def play(timeline: Timeline, *, record_agent: Record = None) -> float:
    """Play the call; return how long the handshake took (connect to session.accept), in s.

    ``record_agent`` records the call on the agent's side too (``AgentServer(record=...)``).
    """
    luigi = Luigi()
    token = secrets.token_urlsafe(16)
    async with luigi.server(token=token, record=record_agent) as server:
        target = AgentTarget(check_url(server.url), token)
        link = EngineLink(target, session_id="call-0042", agent="luigi", record=timeline)
        try:
            return await _call(link, timeline)
        finally:
            await link.close()


async def _call(link: EngineLink, timeline: Timeline) -> float:
    timeline.step("handshake and greeting")
    began = time.perf_counter()
    if not await link.start():
        raise DemoFailed(f"the agent did not take the call: {await link.next_notice()}")
    handshake = time.perf_counter() - began

    timeline.step("a user turn")
    link.send_turn_user_started(epoch=1)
    link.send_user_transcript(text="Are you open on Sunday?", final=True)
    link.send_turn_user_ended(epoch=1)
    link.send_user_text(epoch=1, text="Are you open on Sunday? Two at 7 pm.")
    await _written(timeline, brisvox.UserText)
    timeline.step("read_only tool call")
    await _tool(link, "check_hours", {"day": "sunday"}, "llm-call-1")
    timeline.step("side_effect tool call")
    await _tool(link, "book_table", {"day": "sunday", "time": "19:00", "party": 2}, "llm-call-2")

    timeline.step("the bot answers, the agent adds a say")
    answer = "We're open until ten. You're booked for two on Sunday at 7 pm."
    link.send_bot_llm_started(epoch=1)
    link.send_bot_text(epoch=1, text=answer)
    link.send_bot_llm_stopped(epoch=1)
    link.send_turn_bot_started(epoch=1)
    link.send_turn_bot_ended(epoch=1)
    await _written(timeline, brisvox.TurnBotEnded)
    say = await _command(link, timeline, brisvox.Say)

    timeline.step("barge-in: the caller talks over the say")
    link.send_bot_llm_started(epoch=2)  # the say is the bot turn of epoch 2
    link.send_bot_text(epoch=2, text=say.text)
    link.send_turn_bot_started(epoch=2)
    link.send_turn_interrupted(epoch=3)
    link.send_turn_user_started(epoch=3)
    await _written(timeline, brisvox.TurnUserStarted)

    timeline.step("the agent ends the call")
    link.send_user_transcript(text="Got it, that's all.", final=True)
    link.send_turn_user_ended(epoch=3)
    link.send_user_text(epoch=3, text="Got it, that's all, thanks.")
    await _written(timeline, brisvox.UserText)
    await _command(link, timeline, brisvox.End)
    link.send_session_usage(duration_ms=48200, turns=3, interrupted_turns=1)
    await link.end(brisvox.SessionEndReason.ENDED_BY_AGENT)
    return handshake


async def _written(timeline: Timeline, last: type[Event]) -> None:
    """Wait until the last event sent, a ``last``, is written (a tool call would overtake the
    events: control messages are written before queued events)."""
    await timeline.recorded(last.type)


async def _tool(link: EngineLink, name: str, arguments: dict[str, Any], call_id: str) -> None:
    finished = await link.call_tool(name, arguments, call_id=call_id, epoch=1)
    if finished.outcome is not ToolOutcome.RESULT:
        raise DemoFailed(f"{name}: {finished.outcome}: {finished.error}")


async def _command(link: EngineLink, timeline: Timeline, kind: type[C]) -> C:
    """The agent's next command, which must be a ``kind``; answered ok like an engine does."""
    while not isinstance(notice := await link.next_notice(), CommandReceived):
        if notice is None:
            raise DemoFailed(f"the link went down before the agent's {kind.type}")
    command = notice.command
    if not isinstance(command, kind):
        raise DemoFailed(f"expected a {kind.type}, the agent sent a {command.type}")
    link.answer(notice)
    await timeline.recorded(brisvox.CommandResult.type)
    return command
