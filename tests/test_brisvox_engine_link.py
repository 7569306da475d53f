"""The engine side's outbound link over real loopback sockets, against a raw agent written from
the document: replies to bad input always encodable, bad sends refused to their caller, the link
never silently dead (issue 12, item 1)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from msgspec.structs import replace

from tests.peers.raw import DEADLINE, RawAgent, aio
from voxwire import brisvox
from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.brisvox.engine_core import CommandReceived, EngineCore, LinkDown, ToolOutcome
from voxwire.hosts import check_url
from voxwire.sansio import SendText

BOOK = {
    "name": "book",
    "description": "Books a table.",
    "parameters": {"type": "object"},
    "kind": "side_effect",
    "timeout_ms": 4000,
}
ACCEPT = {"type": "session.accept", "version": 1, "tools": [BOOK]}


async def _linked(agent: RawAgent) -> EngineLink:
    link = EngineLink(AgentTarget(check_url(agent.url)), session_id="42", agent="luigi")
    assert await link.start()
    await agent.next("session.start")
    return link


def _user_text(text: str, epoch: int = 1) -> brisvox.UserText:
    return brisvox.UserText(seq=0, t_ms=0, epoch=epoch, text=text)


async def _still_usable(agent: RawAgent, link: EngineLink) -> None:
    """An event, a command and its result, and the call's end still go through."""
    link.send_event(_user_text("still here"))
    event = await agent.next()
    assert isinstance(event, brisvox.UserText) and event.text == "still here"
    await agent.send(json.dumps({"type": "say", "id": "c1", "text": "hello"}))
    async with asyncio.timeout(DEADLINE):
        received = await link.next_notice()
    assert isinstance(received, CommandReceived)
    link.answer(received)
    result = await agent.next()
    assert isinstance(result, brisvox.CommandResult) and result.id == "c1" and result.ok
    await link.end("hangup")
    end = await agent.next()
    assert isinstance(end, brisvox.SessionEnd) and end.reason == "hangup"


@aio
async def test_a_command_whose_id_breaks_the_id_rule_is_refused_with_an_error_event() -> None:
    async with RawAgent() as agent:
        link = await _linked(agent)
        await agent.send(json.dumps({"type": "say", "id": "i" * 65, "text": "hi"}))
        refused = await agent.next()
        assert isinstance(refused, brisvox.ErrorEvent) and refused.stage == "agent_link"
        assert refused.message.startswith("invalid_argument: say $.id")
        await _still_usable(agent, link)


@aio
async def test_a_refusal_quoting_a_huge_value_is_cut_to_fit() -> None:
    async with RawAgent() as agent:
        link = await _linked(agent)
        mode = "m" * 65000  # quoted by the refusal: the reply must still fit
        transfer = {"type": "transfer", "id": "t1", "destination": "+15551230001", "mode": mode}
        await agent.send(json.dumps(transfer))
        result = await agent.next()
        assert isinstance(result, brisvox.CommandResult) and not result.ok
        assert isinstance(result.error, brisvox.CommandError)
        assert result.error.code == "invalid_argument"
        assert len(result.error.message.encode()) <= brisvox.MAX_REFUSAL_BYTES
        await _still_usable(agent, link)


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda link: link.send_event(_user_text("x" * 65536)), id="user.text>64KiB"),
        pytest.param(lambda link: link.send_event(_user_text("hi", epoch=-1)), id="epoch=-1"),
        pytest.param(
            lambda link: link.call_tool("book", {"x": "y" * 65536}, call_id="b1", epoch=1),
            id="arguments>64KiB",
        ),
        pytest.param(
            lambda link: link.call_tool("book", {"x": {1, 2}}, call_id="b1", epoch=1),
            id="arguments-with-a-set",
        ),
    ],
)
@aio
async def test_a_bad_send_raises_to_its_caller_and_the_link_stays_usable(send: Any) -> None:
    async with RawAgent(ACCEPT) as agent:
        link = await _linked(agent)
        with pytest.raises(brisvox.ProtocolError):
            send(link)
        assert link.up and link.core.waiting_tools == 0
        await _still_usable(agent, link)


@aio
async def test_an_answer_with_a_70_kb_message_raises_and_nothing_is_sent() -> None:
    async with RawAgent() as agent:
        link = await _linked(agent)
        await agent.send(json.dumps({"type": "say", "id": "c0", "text": "hi"}))
        async with asyncio.timeout(DEADLINE):
            received = await link.next_notice()
        assert isinstance(received, CommandReceived)
        with pytest.raises(brisvox.ProtocolError, match="too_large"):
            link.answer(received, error=("queue_full", "w" * 70_000))
        link.answer(received, error=("queue_full", "8 lines are already waiting"))
        result = await agent.next()
        assert isinstance(result, brisvox.CommandResult) and result.id == "c0" and not result.ok
        await _still_usable(agent, link)


@aio
async def test_an_event_at_the_size_limit_goes_out_and_one_byte_more_is_refused() -> None:
    widest = _user_text("")
    base = len(brisvox.encode(replace(widest, seq=JSON_SAFE_INTEGER, t_ms=JSON_SAFE_INTEGER)))
    fits = brisvox.MAX_MESSAGE_BYTES - base
    async with RawAgent() as agent:
        link = await _linked(agent)
        with pytest.raises(brisvox.ProtocolError, match="too_large"):
            link.send_event(_user_text("x" * (fits + 1)))
        link.send_event(_user_text("x" * fits))
        event = await agent.next()
        assert isinstance(event, brisvox.UserText) and len(event.text) == fits
        await _still_usable(agent, link)


# -- a writer that fails ---------------------------------------------------------------------------


@aio
async def test_a_failing_writer_takes_the_link_down_and_the_fallback_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stamp = EngineCore.stamp
    armed = asyncio.Event()

    def failing(core: EngineCore, frame: SendText, now: float) -> SendText:
        if armed.is_set():  # in the writer's path, as it takes the next batch
            raise RuntimeError("injected writer fault")
        return stamp(core, frame, now)

    monkeypatch.setattr(EngineCore, "stamp", failing)
    caplog.set_level(logging.WARNING)
    async with RawAgent(ACCEPT) as agent:
        link = await _linked(agent)
        pending = link.call_tool("book", {"time": "19:00"}, call_id="b1", epoch=1)
        assert isinstance(await agent.next(), brisvox.ToolCall)
        armed.set()
        link.send_event(_user_text("never written"))
        async with asyncio.timeout(DEADLINE):
            finished = await pending
            down = await link.next_notice()
        assert finished.outcome is ToolOutcome.OUTCOME_UNKNOWN  # side_effect: never repeated
        assert isinstance(down, LinkDown) and down.reconnect_in is None
        assert "the writer failed" in down.reason and link.gone and not link.up
        assert "injected writer fault" in caplog.text
        await link.close()
