"""An agent written with the published brisvox-agent SDK, run in its own venv by the interop tests.

It listens on a free loopback port, prints ``{"kind": "ready", "port": N}`` and then one JSON
line for everything it receives, so the test can assert what the real peer saw.
Usage: python sdk_agent.py [--resume]   (the token comes from BRISVOX_AGENT_TOKEN)
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from brisvox_agent import Agent, ToolContext

agent = Agent(
    "luigi",
    system_prompt="You are Luigi's host.",
    greeting="Hi, Luigi's here.",
    events=None,
    resume="--resume" in sys.argv,
)


def emit(kind: str, **data: Any) -> None:
    print(json.dumps({"kind": kind, **data}), flush=True)


@agent.tool
async def opening_hours(day: str) -> str:
    """Opening hours of the restaurant on a weekday."""
    emit("tool", name="opening_hours", day=day)
    return "12:00 to 22:00"


@agent.tool
async def slow_lookup(query: str, ctx: ToolContext) -> str:
    """A lookup that takes its time."""
    emit("tool", name="slow_lookup", query=query)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        emit("cancelled", name="slow_lookup", reason=ctx.cancel_reason)
        raise
    return "too late"


@agent.tool(kind="side_effect", timeout_ms=4000)
async def book_table(time: str, ctx: ToolContext) -> str:
    """Books a table."""
    emit("tool", name="book_table", time=time, key=ctx.idempotency_key)
    await asyncio.sleep(0.3)
    emit("finished", name="book_table", reason=ctx.cancel_reason)
    return f"booked for {time}"


@agent.on_user_text
async def heard(session: Any, event: Any) -> None:
    emit("user.text", text=event.text, seq=event.seq)
    if "hours" in event.text:
        result = await session.say("We open at noon.")
        emit("command.result", id=result.id, ok=result.ok)
    elif "bye" in event.text:
        result = await session.end("Goodbye!")
        emit("command.result", id=result.id, ok=result.ok)


@agent.on_turn
async def turn(session: Any, event: Any) -> None:
    emit(event.TYPE, epoch=event.epoch, seq=event.seq)


@agent.on_resumed
async def resumed(session: Any, event: Any) -> None:
    emit("resumed", attempt=event.attempt, previous_seq=event.previous_seq, seen_seq=event.seen_seq)


@agent.on_events_lost
async def lost(session: Any, event: Any) -> None:
    emit("events.lost", count=event.count)


@agent.on_error
async def error(session: Any, event: Any) -> None:
    emit("error", stage=event.stage, message=event.message)


@agent.on_session_end
async def ended(session: Any, event: Any) -> None:
    emit("session.end", reason=event.reason)


agent.run(host="127.0.0.1", port=0, on_ready=lambda server: emit("ready", port=server.port))
