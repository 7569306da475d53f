"""Misuses of the typed API: each line marked ``# error`` must be a mypy --strict and a pyright
error, and no other line may be one."""

from __future__ import annotations

from typecheck.stubs import Agent, Client, Engine, Gateway
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentSession
from voxwire.brisvox.engine import EngineLink
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import GatewaySession


def on_final(event: ovp.TranscriptFinal) -> None:
    print(event.text)


def on_partial(event: ovp.TranscriptPartial) -> None:
    print(event.text)


def on_user_text(event: brisvox.UserText) -> None:
    print(event.text)


def misuse() -> None:
    client = Client()
    client.send_agent_input(txt="hello", source=ovp.InputSource.CALLER_TRANSCRIPT)  # error
    client.send_agent_input(text=42, source=ovp.InputSource.CALLER_TRANSCRIPT)  # error
    client.send_agent_output(text="hi", final=True)  # error
    client.send_session_resume(last_server_seq=3)  # error
    client.on("transcript.finall", on_final)  # error
    client.on("transcript.final", on_partial)  # error
    client.on("agent.input", on_final)  # error
    gateway = Gateway()
    gateway.send_agent_output(turn_id="t1", text="hi", finall=True)  # error
    gateway.send_agent_output(turn_id="t1", text="hi", final=True, seq=3)  # error
    gateway.send_agent_input(text="hi", source=ovp.InputSource.SYSTEM)  # error
    agent = Agent()
    agent.send_say(txt="hi")  # error
    agent.send_say(text="hi", id="c1")  # error
    agent.send_user_text(epoch=1, text="hi")  # error
    agent.on("user.txt", on_user_text)  # error
    agent.on("user.transcript", on_user_text)  # error
    engine = Engine()
    engine.send_say(text="hi")  # error
    engine.send_tool_call(call_id="x", name="book", arguments={}, epoch=1, id=7)  # error


async def misuse_the_real_adapters(
    client: OVPClient, session: GatewaySession, agent: AgentSession, engine: EngineLink
) -> None:
    await client.send_agent_input(txt="hello", source=ovp.InputSource.CALLER_TRANSCRIPT)  # error
    await client.send_agent_output(turn_id="t1", text="hi", final=True)  # error
    client.on("transcript.finall", on_final)  # error
    client.on("transcript.final", on_partial)  # error
    session.send_agent_output(turn_id="t1", text="hi", finall=True)  # error
    session.send_agent_input(text="hi", source=ovp.InputSource.SYSTEM)  # error
    await agent.send_say(txt="One moment.")  # error
    agent.on("user.transcript", on_user_text)  # error
    engine.send_user_text(epoch=1, txt="hi")  # error
    engine.send_say(text="hi")  # error
