"""The same handler program on all four roles behaves the same (voxwire.session): a plain and an
async handler of one message type, both raising, are each logged at ERROR on the role's logger
with the session id, the message type and the traceback, counted in ``handler_errors``, reported
to watch_handler_failures, and the session goes on; the Brisvox test harness fails with the
handler's text instead of timing out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.test_ovp_support import AGENT, CALL, SESSION, eventually, ovp_client, run, serving
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession, CommandFailed
from voxwire.brisvox.testing import AgentCall
from voxwire.ovp.gateway import GatewaySession
from voxwire.session import HandlerFailure, watch_handler_failures

PLAIN = "the plain handler broke"
LATER = "the async handler broke"
WAIT = 5.0
"""Real seconds any step may take (a busy machine)."""


def handler_program(on: Callable[[str, Any], None], message_type: str) -> None:
    """The program every role runs: two handlers of ``message_type``, each raising."""

    def plain(message: object) -> None:
        raise RuntimeError(PLAIN)

    async def later(message: object) -> None:
        await asyncio.sleep(0)
        raise RuntimeError(LATER)

    on(message_type, plain)
    on(message_type, later)


def _raised(
    caplog: pytest.LogCaptureFixture, logger: str, session_id: str, message_type: str
) -> list[str]:
    """The exception texts of the handler failures ``logger`` logged, in order."""
    return [
        str(record.exc_info[1])
        for record in caplog.records
        if record.name == logger
        and record.levelno == logging.ERROR
        and record.getMessage() == f"session {session_id}: a {message_type} handler raised"
        and record.exc_info is not None
    ]


def _texts(failures: list[HandlerFailure]) -> list[str]:
    return [str(f.error) for f in failures]


# -- Brisvox ------------------------------------------------------------------------------------


def test_the_agents_raising_handlers_are_logged_counted_and_fail_the_harness_with_their_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sessions: list[AgentSession] = []

    async def on_session(session: AgentSession) -> None:
        sessions.append(session)
        handler_program(session.on, "user.text")
        async for event in session:  # what has no handler: the call goes on
            if isinstance(event, brisvox.UserTranscript):
                await session.send_say(text="still here")

    async def main() -> None:
        async with (
            AgentServer(on_session, token=None) as server,
            AgentCall.open(server.url) as call,
        ):
            call.user_says("hello")  # user.text among the turn's events
            with pytest.raises(AssertionError, match=PLAIN) as first:
                await call.expect(brisvox.Say, timeout=WAIT)
            with pytest.raises(AssertionError, match=LATER) as second:
                await call.expect(brisvox.Say, timeout=WAIT)
            assert "session test-call: a user.text handler raised" in str(first.value)
            assert isinstance(second.value.__cause__, RuntimeError)
            say = await call.expect(brisvox.Say, timeout=WAIT)  # the session went on
            assert say.text == "still here"
            assert sessions[0].handler_errors == 2
            await call.hang_up()

    with caplog.at_level(logging.ERROR):
        run(main(), timeout=20)
    assert _raised(caplog, "voxwire.brisvox.agent", "test-call", "user.text") == [PLAIN, LATER]


def test_the_engines_raising_command_handlers_are_logged_counted_and_answer_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[BaseException | brisvox.CommandResult] = []

    async def on_session(session: AgentSession) -> None:
        async for event in session:
            if isinstance(event, brisvox.UserText):  # once the engine's handlers are in place
                try:
                    answers.append(await session.send_say(text="hello"))
                except Exception as exc:
                    answers.append(exc)

    async def main() -> None:
        async with (
            AgentServer(on_session, token=None) as server,
            AgentCall.open(server.url) as call,
        ):
            handler_program(call.link.on, "say")  # the engine side's handlers
            call.user_says("hours?")
            with pytest.raises(AssertionError, match=PLAIN):
                await call.expect(brisvox.Say, timeout=WAIT)
            with pytest.raises(AssertionError, match=LATER):
                await call.expect(brisvox.Say, timeout=WAIT)
            async with asyncio.timeout(WAIT):
                while not answers:
                    await asyncio.sleep(0.01)
            assert call.link.handler_errors == 2 and call.sent == []  # handled: not iterated
            await call.hang_up()

    with caplog.at_level(logging.ERROR):
        run(main(), timeout=20)
    [refused] = answers
    assert isinstance(refused, CommandFailed) and refused.code == "unavailable"
    assert _raised(caplog, "voxwire.brisvox.engine", "test-call", "say") == [PLAIN, LATER]


# -- OVP ----------------------------------------------------------------------------------------


def test_the_ovp_clients_raising_handlers_are_logged_counted_and_watched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.send_agent_output(turn_id="t1", text="first", final=True)
        session.send_agent_thinking(turn_id="t1", delta="goes on")
        session.end()

    async def main() -> list[HandlerFailure]:
        failures: list[HandlerFailure] = []
        with watch_handler_failures(failures.append):
            async with serving(handler) as gateway:
                client = ovp_client(gateway.url)
                handler_program(client.on, "agent.output")
                await client.connect()
                rest = [event.type async for event in client]  # what has no handler
                await eventually(lambda: client.handler_errors == 2, timeout=WAIT)
                assert rest == ["session.start", "agent.thinking", "session.end"]
                await client.close()
        return failures

    with caplog.at_level(logging.ERROR):
        failures = run(main(), timeout=20)
    assert _texts(failures) == [PLAIN, LATER]
    assert [(f.session_id, f.message_type) for f in failures] == [(SESSION, "agent.output")] * 2
    assert _raised(caplog, "voxwire.ovp.client", SESSION, "agent.output") == [PLAIN, LATER]


def test_the_ovp_gateways_raising_handlers_are_logged_counted_and_watched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sessions: list[GatewaySession] = []
    rest: list[str] = []

    async def handler(session: GatewaySession) -> None:
        sessions.append(session)
        handler_program(session.on, "agent.input")
        session.start(CALL, AGENT)
        async for item in session:  # what has no handler: the session goes on
            if isinstance(item, ovp.ClientMessage):
                rest.append(item.type)
                session.end()

    async def main() -> list[HandlerFailure]:
        failures: list[HandlerFailure] = []
        with watch_handler_failures(failures.append):
            async with serving(handler) as gateway:
                client = ovp_client(gateway.url)
                await client.connect()
                await client.send_agent_input(source=ovp.InputSource.SYSTEM, text="hi")
                await client.send_dtmf(digits="1")
                await client.run()
                await eventually(lambda: sessions[0].handler_errors == 2, timeout=WAIT)
                await client.close()
        return failures

    with caplog.at_level(logging.ERROR):
        failures = run(main(), timeout=20)
    assert rest == ["dtmf.send"]
    assert _texts(failures) == [PLAIN, LATER]
    assert _raised(caplog, "voxwire.ovp.gateway", SESSION, "agent.input") == [PLAIN, LATER]
