"""The typed API of both Brisvox roles over loopback: the generated typed sends and typed
``on()`` on EngineLink and AgentSession, end to end (issue 13)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.peers.raw import DEADLINE, aio
from voxwire import brisvox
from voxwire.brisvox.agent import AgentServer, AgentSession, CommandFailed
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.hosts import check_url


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(DEADLINE):
        while not predicate():
            await asyncio.sleep(0.005)


@aio
async def test_typed_sends_and_handlers_carry_a_call_both_ways() -> None:
    heard: list[brisvox.UserText] = []
    results: list[brisvox.CommandResult] = []
    refused: list[CommandFailed] = []

    async def on_session(session: AgentSession) -> None:
        async def answer(event: brisvox.UserText) -> None:
            heard.append(event)
            results.append(await session.send_say(text="We open at noon.", re=event.seq))
            try:
                await session.send_transfer(destination="+15551230002")
            except CommandFailed as exc:
                refused.append(exc)

        session.on("user.text", answer)
        async for _ in session:  # everything without a handler; ends with session.end
            pass

    spoken: list[brisvox.Say] = []

    def refuse(transfer: brisvox.Transfer) -> None:
        raise CommandFailed("unsupported", f"no call control to reach {transfer.destination}")

    async with AgentServer(on_session, token=None) as server:
        link = EngineLink(AgentTarget(check_url(server.url)), session_id="42", agent="luigi")
        link.on("say", spoken.append)
        link.on("transfer", refuse)
        assert await link.start()
        link.send_user_text(epoch=1, text="When do you open?")
        await _until(lambda: refused)
        await link.end("hangup")
    assert [e.text for e in heard] == ["When do you open?"]
    assert [s.text for s in spoken] == ["We open at noon."] and spoken[0].re == heard[0].seq
    assert results[0].ok and results[0].id == "c1"
    assert refused[0].code == "unsupported" and "+15551230002" in refused[0].message


@aio
async def test_on_refuses_a_type_the_other_end_never_sends_at_once() -> None:
    link = EngineLink(AgentTarget(check_url("ws://127.0.0.1:9")), session_id="1", agent="a")
    with pytest.raises(ValueError, match="'sai' is not a message type the engine receives"):
        link.on("sai", print)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"the engine sends 'user\.text' and never receives it"):
        link.on("user.text", print)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="own method"):
        link._send(brisvox.ToolCancel, {"id": 1, "reason": "interrupted"})
    await link.close()


@aio
async def test_a_typed_send_that_breaks_a_rule_raises_to_its_caller() -> None:
    async with AgentServer(lambda session: asyncio.sleep(0), token=None) as server:
        link = EngineLink(AgentTarget(check_url(server.url)), session_id="42", agent="luigi")
        assert await link.start()
        with pytest.raises(brisvox.ProtocolError, match="epoch"):
            link.send_user_text(epoch=-1, text="hi")
        assert link.up
        await link.end("hangup")


@aio
async def test_a_handler_that_crashes_answers_unavailable_and_the_link_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[CommandFailed] = []
    results: list[brisvox.CommandResult] = []

    async def on_session(session: AgentSession) -> None:
        try:
            await session.send_say(text="first")
        except CommandFailed as exc:
            failures.append(exc)
        results.append(await session.send_end(say="Goodbye."))

    def crash(say: brisvox.Say) -> None:
        raise KeyError("a bug in the engine")

    async def slow_ok(end: brisvox.End) -> None:
        await asyncio.sleep(0.01)  # an awaitable handler: answered once it completes

    async with AgentServer(on_session, token=None) as server:
        link = EngineLink(AgentTarget(check_url(server.url)), session_id="42", agent="luigi")
        link.on("say", crash)
        link.on("end", slow_ok)
        assert await link.start()
        await _until(lambda: results)
        await link.end("ended_by_agent")
    assert failures[0].code == "unavailable" and "say" in failures[0].message
    assert results[0].ok and "a bug in the engine" in caplog.text
