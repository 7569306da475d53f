"""Interop with the real peer: the published brisvox-agent SDK 0.1.2, driven by our engine side.

The SDK pins websockets < 16, so it runs in its own venv (.cache/brisvox-sdk, made on first use)
and its own process (tests/peers/sdk_agent.py), which prints what it receives as JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.peers.raw import DEADLINE, aio
from voxwire import brisvox
from voxwire.brisvox.engine_core import AgentAccepted, LinkDown, ToolOutcome
from voxwire.brisvox.testing import AgentCall

SDK_VERSION = "0.1.2"
VENV = ROOT / ".cache" / "brisvox-sdk"
PEER = Path(__file__).parent / "peers" / "sdk_agent.py"
TOKEN = "interop-token"


@pytest.fixture(scope="session")
def sdk_python() -> Path:
    """The venv's python with brisvox-agent 0.1.2 (created once, reused when present)."""
    python = VENV / "bin" / "python"
    check = [
        str(python),
        "-c",
        f"import brisvox_agent as a; assert a.__version__ == {SDK_VERSION!r}",
    ]
    if python.exists() and subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, timeout=300)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"brisvox-agent=={SDK_VERSION}"],
        check=True,
        timeout=600,
    )
    subprocess.run(check, check=True, timeout=60)
    return python


class Peer:
    """The SDK agent's process and the JSON lines it printed."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.url = ""

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.lines.append(json.loads(line))

    async def saw(self, kind: str, count: int = 1, **match: Any) -> list[dict[str, Any]]:
        """Wait until the peer printed ``count`` lines of ``kind`` matching ``match``."""

        def found() -> list[dict[str, Any]]:
            return [
                line
                for line in self.lines
                if line["kind"] == kind and all(line.get(k) == v for k, v in match.items())
            ]

        async with asyncio.timeout(DEADLINE):
            while len(found()) < count:
                await asyncio.sleep(0.01)
        return found()


@asynccontextmanager
async def sdk_agent(python: Path, *args: str) -> AsyncIterator[Peer]:
    process = await asyncio.create_subprocess_exec(
        str(python),
        str(PEER),
        *args,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "BRISVOX_AGENT_TOKEN": TOKEN},
    )
    peer = Peer(process)
    reader = asyncio.ensure_future(peer._read())
    try:
        [ready] = await peer.saw("ready")
        peer.url = f"ws://127.0.0.1:{ready['port']}"
        yield peer
    finally:
        process.terminate()
        async with asyncio.timeout(DEADLINE):
            await process.wait()
        reader.cancel()


def test_the_sdk_venv_holds_the_pinned_peer(sdk_python: Path) -> None:
    done = subprocess.run(
        [str(sdk_python), "-m", "pip", "show", "brisvox-agent", "websockets"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"Version: {SDK_VERSION}" in done.stdout
    assert "Version: 15." in done.stdout  # its own websockets, not ours


@aio
async def test_handshake_tools_say_and_command_result(sdk_python: Path) -> None:
    async with sdk_agent(sdk_python) as peer, AgentCall.open(peer.url, token=TOKEN) as call:
        accept = call.accept
        assert accept.version == 1 and accept.greeting == "Hi, Luigi's here."
        assert accept.system_prompt == "You are Luigi's host." and not accept.resume
        tools = call.tools
        assert set(tools) == {"opening_hours", "slow_lookup", "book_table"}
        assert tools["book_table"].kind is brisvox.ToolKind.SIDE_EFFECT
        assert tools["book_table"].timeout_ms == 4000
        assert tools["opening_hours"].parameters["required"] == ["day"]
        call.user_says("What are your hours?")
        say = await call.expect(brisvox.Say)
        assert say.text == "We open at noon." and isinstance(say.id, str)
        [result] = await peer.saw("command.result")
        assert result == {"kind": "command.result", "id": say.id, "ok": True}
        [text] = await peer.saw("user.text")
        assert text["text"] == "What are your hours?" and say.re == text["seq"]
        await peer.saw("turn.user_started")


@aio
async def test_read_only_and_side_effect_tool_calls(sdk_python: Path) -> None:
    async with sdk_agent(sdk_python) as peer, AgentCall.open(peer.url, token=TOKEN) as call:
        hours = await call.tool("opening_hours", day="monday")
        assert hours.outcome is ToolOutcome.RESULT and hours.result == "12:00 to 22:00"
        booking = await call.tool("book_table", time="19:00")
        assert booking.outcome is ToolOutcome.RESULT and booking.result == "booked for 19:00"
        [tool] = await peer.saw("tool", name="book_table")
        assert len(tool["key"]) == 16 and int(tool["key"], 16) >= 0
        unknown = await call.tool("missing_tool")
        assert unknown.outcome is ToolOutcome.UNKNOWN_TOOL  # never sent


@aio
async def test_tool_cancel_stops_read_only_and_only_advises_side_effect(sdk_python: Path) -> None:
    async with sdk_agent(sdk_python) as peer, AgentCall.open(peer.url, token=TOKEN) as call:
        lookup = call.start_tool("slow_lookup", query="menu")
        await peer.saw("tool", name="slow_lookup")
        call.barge_in()
        call.cancel(lookup)
        assert (await lookup).outcome is ToolOutcome.INTERRUPTED
        [cancelled] = await peer.saw("cancelled")
        assert cancelled["reason"] == "interrupted"
        booking = call.start_tool("book_table", time="20:00")
        await peer.saw("tool", name="book_table")
        call.cancel(booking)  # advice: the booking finishes and its result still counts
        finished = await booking
        assert finished.outcome is ToolOutcome.RESULT and finished.result == "booked for 20:00"
        [done] = await peer.saw("finished")
        assert done["reason"] == "interrupted"


@aio
async def test_end_and_session_end(sdk_python: Path) -> None:
    async with sdk_agent(sdk_python) as peer, AgentCall.open(peer.url, token=TOKEN) as call:
        call.user_says("ok, bye")
        end = await call.expect(brisvox.End)
        assert end.say == "Goodbye!"
        await peer.saw("command.result")
        await call.hang_up("ended_by_agent")
        [ended] = await peer.saw("session.end")
        assert ended["reason"] == "ended_by_agent"


@aio
async def test_a_wrong_token_is_refused_by_the_sdk(sdk_python: Path) -> None:
    from voxwire.brisvox.testing import AgentRefused

    async with sdk_agent(sdk_python) as peer:
        with pytest.raises(AgentRefused, match="401"):
            async with AgentCall.open(peer.url, token="wrong"):
                pass


@aio
async def test_a_dropped_link_is_taken_up_again_with_resume(sdk_python: Path) -> None:
    async with (
        sdk_agent(sdk_python, "--resume") as peer,
        AgentCall.open(peer.url, token=TOKEN, session_id="resume-1") as call,
    ):
        assert call.accept.resume
        call.user_says("hello")
        await peer.saw("user.text", text="hello")
        assert call.link._ws is not None
        call.link._ws.transport.abort()  # the link drops without a close
        async with asyncio.timeout(DEADLINE):
            while not any(isinstance(n, AgentAccepted) and n.resumed for n in call.notices):
                await asyncio.sleep(0.01)
        [down] = [n for n in call.notices if isinstance(n, LinkDown)]
        assert down.reconnect_in is not None and down.reconnect_in <= 0.1
        call.user_says("what are your hours")
        say = await call.expect(brisvox.Say)
        assert say.text == "We open at noon."
        [resumed] = await peer.saw("resumed")
        assert resumed["attempt"] == 1 and resumed["previous_seq"] >= resumed["seen_seq"]
        [lost] = await peer.saw("events.lost")
        assert lost["count"] == 0
        hours = await call.tool("opening_hours", day="friday")  # tools stay registered
        assert hours.outcome is ToolOutcome.RESULT
        texts = await peer.saw("user.text", count=2)
        assert [t["text"] for t in texts] == ["hello", "what are your hours"]  # nothing twice
