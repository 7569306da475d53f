"""The OVP half of ``voxwire demo``: a gateway emulation plays the document's worked examples.

A :class:`~voxwire.ovp.gateway.Gateway` on loopback runs :class:`GatewayEmulation`, which answers
each caller utterance with the next worked example of the protocol document (a simple Q&A, a
tool call mid-conversation, a human handoff), with synthetic 16 kHz audio both ways. An
:class:`~voxwire.ovp.client.OVPClient` streams the caller's utterances (sine tones) and plays the
contact-centre part of the handoff. The clock runs :data:`SPEED` times faster than real time, so
the 20 ms frame pacing and the call take well under a second. Every message passes through the
client's ``record`` option into the :class:`~voxwire.demo.timeline.Timeline`.
"""

from __future__ import annotations

import math
import secrets
import struct
import time
from collections.abc import Callable
from typing import Final

from voxwire import ovp
from voxwire.capture import Record
from voxwire.clock import Clock, ScaledClock
from voxwire.demo import DemoFailed
from voxwire.demo.timeline import RoundTrip, Timeline
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token

__all__ = ["HANDSHAKE", "ROUND_TRIPS", "SPEED", "GatewayEmulation", "play", "tone"]

SPEED: Final = 10.0
"""How many times faster than real time the call's clock runs."""

HANDSHAKE = "connect to session.start"
"""What the handshake time of the summary spans."""

ROUND_TRIPS = (
    RoundTrip(ovp.AgentToolInvoke.type, ovp.AgentToolResult.type, "tool_call_id", "tool_call_id"),
    RoundTrip(ovp.AgentHandoffRequested.type, ovp.AgentHandoffAccepted.type),
    RoundTrip(ovp.SupervisorTakeover.type, ovp.AudioFlush.type),
    RoundTrip(ovp.AgentHandoffCompleted.type, ovp.SessionEnd.type),
)
"""What the summary measures: the tool call, and the handoff's event round trips."""

SESSION_ID: Final = "ovps_demo_0042"
OPERATOR: Final = "usr_dana"
CALL: Final = ovp.CallInfo(
    call_id="call_demo_0042",
    from_="+14155551234",
    to="+18005550100",
    direction=ovp.CallDirection.INBOUND,
    secure=True,
)
AGENT: Final = ovp.AgentConfig(
    agent_id="agt_demo",
    name="Front-desk Support",
    instructions="You are a friendly receptionist.",
    model="demo-llm",
    voice_id="demo-voice",
    language="en-US",
    tools=[
        ovp.ToolDefinition(
            name="lookup_order",
            description="Fetch an order by id",
            input_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
            streaming=False,
        )
    ],
)


def tone(hz: float, frames: int, volume: int = 6000) -> bytes:
    """``frames`` 20 ms frames of a sine tone as 16 kHz PCM16LE (``hz`` 0: silence)."""
    samples = frames * ovp.SAMPLES_PER_FRAME
    return struct.pack(
        f"<{samples}h",
        *(
            round(volume * math.sin(2 * math.pi * hz * n / ovp.SAMPLE_RATE_HZ))
            for n in range(samples)
        ),
    )


class GatewayEmulation:
    """The gateway side: answers each caller utterance with the next worked example."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def __call__(self, session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        scenes = [self.simple_qa, self.tool_call, self.handoff]
        heard = 0
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                heard += 1
                if item.last_of_utterance and scenes:
                    await scenes.pop(0)(session, heard, item.frame_seq)
                    heard = 0
            elif isinstance(item, ovp.SupervisorTakeover):
                session.send_audio_flush(cause=ovp.FlushCause.TAKEOVER)
            elif isinstance(item, ovp.AgentHandoffCompleted):
                # Audio goes on, the agent's TTS muted; the AI still transcribes as an observer.
                await self.speak(session, tone(0, 10), silence=True)
                self.final(
                    session,
                    "utt_4",
                    "Hi, this is Dana. Let me look into that.",
                    ovp.Speaker.OPERATOR,
                )
                session.end(ovp.SessionEndReason.TRANSFERRED)

    async def simple_qa(self, session: GatewaySession, frames: int, last: int) -> None:
        """Worked example: simple Q&A call (the call goes on instead of hanging up)."""
        self.ingress(session, frames, last)
        for partial in ("What time", "What time do you close"):
            session.send_transcript_partial(
                utterance_id="utt_1",
                speaker=ovp.Speaker.CALLER,
                text=partial,
            )
        self.final(session, "utt_1", "What time do you close on Sundays?")
        for delta in ("We", " close", " at", " 6pm"):
            session.send_agent_thinking(turn_id="turn_1", delta=delta)
        session.send_agent_output(turn_id="turn_1", text="We close at 6pm on Sundays.", final=True)
        await self.speak(session, tone(220, 20))
        session.send_audio_egress(utterance_id="utt_a", bytes_sent=12800, final=False)
        await self.speak(session, tone(220, 30), last=True)
        session.send_audio_egress(
            utterance_id="utt_a", turn_id="turn_1", bytes_sent=32000, final=True
        )
        session.send_agent_latency_breakdown(
            turn_id="turn_1",
            stt_first_token_ms=89,
            stt_final_ms=240,
            llm_first_token_ms=312,
            llm_final_ms=980,
            tts_first_byte_ms=132,
            total_turn_ms=1452,
        )
        # The 5 s reports are the core's: the application gives their values.
        session.set_quality(packet_loss_pct=0.2, jitter_ms=4.5, rtt_ms=38.0, mos=4.3)
        session.set_cost(
            ovp.CostBreakdown(
                llm_usd_micros=1200,
                stt_usd_micros=300,
                tts_usd_micros=450,
                voice_termination_usd_micros=700,
            )
        )

    async def tool_call(self, session: GatewaySession, frames: int, last: int) -> None:
        """Worked example: tool call mid-conversation."""
        self.ingress(session, frames, last)
        self.final(session, "utt_2", "Where's my order 12345?")
        session.send_agent_thinking(turn_id="turn_2", delta="Let me check")
        session.send_agent_tool_invoke(
            turn_id="turn_2",
            tool_call_id="tc_1",
            name="lookup_order",
            arguments={"order_id": "12345"},
        )
        began = self.clock.now()
        await self.speak(session, tone(330, 10, volume=1500))  # filler audio while the tool runs
        result = {"status": "shipped", "carrier": "UPS", "tracking": "1Z999AA10123456784"}
        duration = round((self.clock.now() - began) * 1000)
        session.send_agent_tool_result(
            turn_id="turn_2",
            tool_call_id="tc_1",
            result=result,
            duration_ms=duration,
        )
        for delta in ("Your", " order"):
            session.send_agent_thinking(turn_id="turn_2", delta=delta)
        text = "Your order shipped yesterday via UPS, tracking 1Z999AA10123456784."
        session.send_agent_output(turn_id="turn_2", text=text, final=True)
        await self.speak(session, tone(220, 25), last=True)
        session.send_audio_egress(
            utterance_id="utt_b", turn_id="turn_2", bytes_sent=16000, final=True
        )

    async def handoff(self, session: GatewaySession, frames: int, last: int) -> None:
        """Worked example: human handoff (the client's contact centre does the rest)."""
        self.ingress(session, frames, last)
        self.final(session, "utt_3", "I want to talk to a person")
        session.send_agent_handoff_requested(
            reason=ovp.HandoffReason.CALLER_REQUESTED,
            caller_summary="Order 12345 shipped yesterday; the caller asks for a person.",
            sentiment=ovp.Sentiment.FRUSTRATED,
        )

    async def speak(
        self, session: GatewaySession, pcm: bytes, *, last: bool = False, silence: bool = False
    ) -> None:
        """Send ``pcm`` as frames paced at 20 ms on the call's clock."""
        count = len(pcm) // ovp.PCM_BYTES_PER_FRAME
        for index in range(count):
            flags = ovp.FLAG_SILENCE if silence else 0
            if last and index == count - 1:
                flags |= ovp.FLAG_LAST_OF_UTTERANCE
            chunk = pcm[index * ovp.PCM_BYTES_PER_FRAME : (index + 1) * ovp.PCM_BYTES_PER_FRAME]
            session.send_audio(chunk, flags=flags)
            await self.clock.sleep(ovp.FRAME_MS / 1000)

    @staticmethod
    def ingress(session: GatewaySession, frames: int, last: int) -> None:
        """Acknowledge the caller's utterance: ``frames`` frames, the last ``last``."""
        session.send_audio_ingress(
            window_ms=frames * ovp.FRAME_MS,
            frames=frames,
            last_frame_seq=last,
            speech=True,
        )

    @staticmethod
    def final(
        session: GatewaySession,
        utterance: str,
        text: str,
        speaker: ovp.Speaker = ovp.Speaker.CALLER,
    ) -> None:
        """A committed transcript of ``text``, with word timings."""
        words = [
            ovp.Word(word=word, start_ms=250 * i, end_ms=250 * i + 220, confidence=0.95)
            for i, word in enumerate(text.split())
        ]
        session.send_transcript_final(
            utterance_id=utterance,
            speaker=speaker,
            language="en-US",
            text=text,
            confidence=0.94,
            words=words,
        )


async def play(timeline: Timeline, *, record_gateway: Record = None) -> float:
    """Play the call; return how long the handshake took (connect to session.start), in s.

    ``record_gateway`` records the call on the gateway's side too (``Gateway(record=...)``).
    """
    clock = ScaledClock(SPEED)
    secret = secrets.token_urlsafe(32)
    emulation = GatewayEmulation(clock)
    async with Gateway(emulation, secret=secret, clock=clock, record=record_gateway) as gateway:
        token = mint_token(secret, session_id=SESSION_ID, tenant_id="tenant_demo")
        client = OVPClient(
            gateway.url, SESSION_ID, token, clock=clock, open_timeout=50, record=timeline
        )
        try:
            return await _call(client, timeline)
        finally:
            await client.close()


async def _call(client: OVPClient, timeline: Timeline) -> float:
    timeline.step("handshake: session.start")
    began = time.perf_counter()
    await client.connect()
    handshake = time.perf_counter() - began

    timeline.step("worked example 1: simple Q&A")
    await client.stream_audio(tone(440, 25))  # the caller's question
    await _until(client, lambda event: isinstance(event, ovp.AgentCostTick))

    timeline.step("worked example 2: tool call mid-conversation")
    await client.stream_audio(tone(494, 25))
    await _until(client, lambda event: isinstance(event, ovp.AudioEgress) and event.final)

    timeline.step("worked example 3: human handoff")
    await client.stream_audio(tone(523, 25))
    async for event in client:  # until session.end
        if isinstance(event, ovp.AgentHandoffRequested):  # the contact centre routes the call
            await client.send_agent_handoff_accepted(operator_user_id=OPERATOR, queue_wait_ms=4200)
            await client.send_supervisor_takeover(operator_user_id=OPERATOR, resumable=False)
        elif isinstance(event, ovp.AudioFlush):
            await client.send_agent_handoff_completed(
                operator_user_id=OPERATOR, agent_remains_observer=True
            )
    return handshake


async def _until(client: OVPClient, found: Callable[[ovp.ServerMessage], bool]) -> None:
    async for event in client:
        if found(event):
            return
    raise DemoFailed("the session ended early")
