"""A sample Brisvox agent for Luigi's, a restaurant: the agent side of ``voxwire demo``.

It uses the parts of :mod:`voxwire.brisvox.agent` a real agent needs: a handshake decision with
a greeting, two remote tools (``check_hours`` is ``read_only``, ``book_table`` a
``side_effect`` that books once per tool call, keyed by its ``idempotency_key``), and events it
answers with commands: the booking reference as a ``say`` once the bot has confirmed, and
``end`` when the caller is done.

```text
luigi = Luigi()
async with luigi.server(token="s3cret") as server:   # 127.0.0.1, a free port
    print(server.url)                                 # the engine's BRISVOX_AGENT_URL
```
"""

from __future__ import annotations

from typing import Any

from voxwire import brisvox
from voxwire.brisvox.agent import Accept, AgentServer, AgentSession, Tool, ToolContext, ToolError

__all__ = ["Luigi"]

OPENING_HOURS = {
    "friday": ("12:00", "23:00"),
    "saturday": ("12:00", "23:00"),
    "sunday": ("12:00", "22:00"),
}
"""The days Luigi's opens, and when."""


class Luigi:
    """The agent: its handshake decision, its tools and what it does during a call."""

    def __init__(self) -> None:
        self.bookings: dict[str, dict[str, str]] = {}
        """Booking references by call (session id), then by the booking tool call's
        idempotency key."""
        self.barge_ins = 0
        """Times a caller talked over the bot."""

    def server(self, **options: Any) -> AgentServer:
        """The agent's WebSocket server (``AgentServer`` options: ``port``, ``token``...)."""
        return AgentServer(self.on_session, tools=self.tools(), on_start=self.on_start, **options)

    def on_start(self, start: brisvox.SessionStart) -> Accept:
        """Take every call, with a greeting and a prompt of our own."""
        return Accept(
            system_prompt="You are the host of Luigi's, a small Italian restaurant.",
            greeting="Hi, Luigi's here. How can I help?",
        )

    def tools(self) -> list[Tool]:
        """The remote tools the engine's LLM may call."""
        day = {"type": "string", "enum": sorted(OPENING_HOURS)}
        return [
            Tool(
                brisvox.ToolDeclaration(
                    name="check_hours",
                    description="When the restaurant opens on a day of the week.",
                    parameters={"type": "object", "properties": {"day": day}, "required": ["day"]},
                    kind=brisvox.ToolKind.READ_ONLY,
                    timeout_ms=2000,
                ),
                self.check_hours,
            ),
            Tool(
                brisvox.ToolDeclaration(
                    name="book_table",
                    description="Books a table; answers the booking reference.",
                    parameters={
                        "type": "object",
                        "properties": {
                            "day": day,
                            "time": {"type": "string"},
                            "party": {"type": "integer", "minimum": 1},
                        },
                        "required": ["day", "time", "party"],
                    },
                    kind=brisvox.ToolKind.SIDE_EFFECT,
                    timeout_ms=4000,
                ),
                self.book_table,
            ),
        ]

    async def check_hours(self, ctx: ToolContext) -> object:
        """read_only: safe to run again or to cancel."""
        hours = OPENING_HOURS.get(str(ctx.call.arguments.get("day")))
        if hours is None:
            return {"open": False}
        return {"open": True, "from": hours[0], "to": hours[1]}

    async def book_table(self, ctx: ToolContext) -> object:
        """side_effect: a redelivered call (same idempotency_key) gets the same booking."""
        arguments = ctx.call.arguments
        if arguments.get("day") not in OPENING_HOURS:
            raise ToolError(f"Luigi's is closed on {arguments.get('day')}")
        made = self.bookings.setdefault(ctx.session.id, {})
        reference = made.setdefault(ctx.call.idempotency_key, f"LU-{1041 + len(made)}")
        return {"booked": True, "reference": reference}

    async def on_session(self, session: AgentSession) -> None:
        """One call: read its events in order and act on some of them."""
        announced: set[str] = set()
        async for event in session:
            if isinstance(event, brisvox.TurnBotEnded):
                # The bot has confirmed a booking: add the reference, once.
                for key, reference in self.bookings.get(session.id, {}).items():
                    if key not in announced:
                        announced.add(key)
                        text = f"Your booking reference is {reference}."
                        await session.send_say(text=text, re=event.seq)
            elif isinstance(event, brisvox.TurnInterrupted):
                self.barge_ins += 1  # the engine already cut the bot; nothing to send
            elif isinstance(event, brisvox.UserText) and "that's all" in event.text.lower():
                await session.send_end(say="Thanks for calling Luigi's. Goodbye!", re=event.seq)
