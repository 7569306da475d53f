"""Correct uses of the typed API: mypy --strict and pyright report nothing here."""

from __future__ import annotations

from typecheck.stubs import Agent, Client, Engine, Gateway
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentSession
from voxwire.brisvox.engine import EngineLink
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import GatewaySession


def on_final(event: ovp.TranscriptFinal) -> None:
    print(event.text)


def on_any_transcript(event: ovp.TranscriptPartial | ovp.TranscriptFinal) -> None:
    print(event.text)


async def on_input(event: ovp.AgentInput) -> None:
    print(event.text)


def on_user_text(event: brisvox.UserText) -> None:
    print(event.text)


def on_say(command: brisvox.Say) -> None:
    print(command.text)


def use() -> None:
    client = Client()
    client.send_agent_input(text="hi", source=ovp.InputSource.DEVELOPER_INJECT)
    client.send_dtmf(digits="12#")
    client.on("transcript.final", on_final)
    client.on("transcript.partial", on_any_transcript)
    client.on("transcript.final", lambda event: print(event.utterance_id))
    gateway = Gateway()
    seq: int = gateway.send_agent_output(turn_id="t1", text="Hello.", final=True)
    print(seq)
    gateway.on("agent.input", on_input)
    agent = Agent()
    agent.send_say(text="One moment.", interrupt=True)
    agent.send_end(say="Goodbye.")
    agent.on("user.text", on_user_text)
    engine = Engine()
    engine.send_user_text(epoch=1, text="A table for two.")
    engine.on("say", on_say)


async def use_the_real_adapters(
    client: OVPClient, session: GatewaySession, agent: AgentSession, engine: EngineLink
) -> None:
    sent: ovp.ClientMessage = await client.send_agent_input(
        text="hi", source=ovp.InputSource.DEVELOPER_INJECT
    )
    print(sent.seq)
    client.on("transcript.final", on_final)
    session.send_agent_output(turn_id="t1", text="Hello.", final=True)
    session.on("agent.input", on_input)
    result: brisvox.CommandResult = await agent.send_say(text="One moment.")
    print(result.ok)
    agent.on("user.text", on_user_text)
    engine.send_user_text(epoch=1, text="A table for two.")
    engine.on("say", on_say)
