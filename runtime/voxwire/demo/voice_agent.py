"""The agent of ``voxwire demo --browser``: a :class:`~voxwire.ovp.gateway.Gateway` handler that
listens to the caller and answers each utterance the way the OVP document's simple Q&A example
does, with the spec's real events.

It has no speech recogniser, no LLM and no TTS, so it is honest about what it heard:
:class:`~voxwire.demo.speech.SpeechDetector` finds each utterance by its energy, and the agent

1. acknowledges the caller's audio every second (``audio.ingress``, ``speech`` true when a frame
   was voiced), and once speech started sends a ``transcript.partial`` of the caller saying how
   long they have spoken (again each second while they speak);
2. when the utterance ends: ``transcript.final`` (speaker ``caller``), the answer's words as
   ``agent.thinking`` deltas, ``agent.output`` (final), then the answer's audio, a synthetic
   voice of one tone a word (:func:`voice`), paced at 20 ms between two ``audio.egress`` (half
   way, and final after the frame marked ``last_of_utterance``), and the turn's
   ``agent.latency.breakdown`` as measured on the gateway's clock;
3. when the caller speaks over it (:data:`~voxwire.demo.speech.MIN_SPEECH_FRAMES` voiced frames
   while its audio is being sent): stops the audio, sends ``agent.barge_in`` with what it had
   sent and ``audio.flush`` (cause ``barge_in``), and answers the new utterance when it ends.

The 5 s ``call.quality.update`` (the caller's leg as the gateway measures it) and
``agent.cost.tick`` (zero: the demo costs nothing) are the gateway's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Final

from voxwire import ovp
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.demo.speech import SpeechDetector, SpeechStarted, Utterance
from voxwire.ovp.gateway import GatewaySession, SessionStateError

__all__ = ["AGENT", "LANGUAGE", "DemoAgent", "answer_text", "voice"]

LANGUAGE: Final = "en-US"
AGENT: Final = ovp.AgentConfig(
    agent_id="agt_softphone_demo",
    name="voxwire demo agent",
    instructions="Say how long the caller spoke.",
    model="none (scripted)",
    voice_id="tones",
    language=LANGUAGE,
    tools=[],
)
_WORD_FRAMES: Final = 7
"""Frames of one word's tone (140 ms), each followed by :data:`_GAP_FRAMES` of silence."""
_GAP_FRAMES: Final = 2
_NOTES: Final = (220.0, 247.0, 262.0, 294.0, 262.0, 247.0)
"""The pitch of each word in turn (Hz); the last word of an answer falls to :data:`_LAST_NOTE`."""
_LAST_NOTE: Final = 196.0
_VOLUME: Final = 8000
_RAMP: Final = 0.02
"""Seconds of a word's fade in and out (no click at its edges)."""
_WINDOW_FRAMES: Final = ovp.INGRESS_WINDOW_MS // ovp.FRAME_MS


def answer_text(utterance: Utterance) -> str:
    """What the agent answers to ``utterance``."""
    seconds = utterance.speech_ms / 1000
    return (
        f"You spoke for {seconds:.1f} seconds. I am the voxwire demo agent, "
        "and each tone you hear is one of my words."
    )


def voice(words: int) -> bytes:
    """The synthetic voice of ``words`` words: 16 kHz PCM16LE, a whole number of frames."""
    return b"".join(
        _word(_LAST_NOTE if word == words - 1 else _NOTES[word % len(_NOTES)])
        for word in range(words)
    )


@functools.cache
def _word(hz: float) -> bytes:
    """One word: a tone of ``hz`` and its octave, faded in and out, then a pause."""
    rate = ovp.SAMPLE_RATE_HZ
    length = _WORD_FRAMES * ovp.SAMPLES_PER_FRAME
    samples = []
    for n in range(length):
        fade = min(1.0, n / (_RAMP * rate), (length - n) / (_RAMP * rate))
        phase = 2 * math.pi * hz * n / rate
        samples.append(round(_VOLUME * fade * (0.7 * math.sin(phase) + 0.3 * math.sin(2 * phase))))
    return struct.pack(f"<{length}h", *samples) + bytes(_GAP_FRAMES * ovp.PCM_BYTES_PER_FRAME)


def _ms(began: float, ended: float) -> int:
    return max(0, round((ended - began) * 1000))


@dataclass
class _Turn:
    """One turn: the caller's utterance ``utt_N`` and the answer ``turn_N``, spoken as
    ``utt_aN``."""

    number: int
    utterance: Utterance
    first_token_at: float
    """When the first transcript of the utterance went (a partial, or else the final)."""
    frames_sent: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def turn_id(self) -> str:
        return f"turn_{self.number}"


class DemoAgent:
    """The demo agent (see the module); pass it to ``Gateway`` as its handler.

    Args:
        clock: The gateway's clock: it paces the agent's audio and times the turns.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    async def __call__(self, session: GatewaySession) -> None:
        call = ovp.CallInfo(
            call_id=f"call_{session.session_id}"[: ovp.MAX_ID_CHARS],
            from_="browser",
            to="voxwire demo agent",
            direction=ovp.CallDirection.INBOUND,
            secure=False,
        )
        session.start(call, AGENT)
        listener = _Listener(session, self.clock)
        try:
            async for item in session:
                if isinstance(item, ovp.AudioFrame):
                    listener.hear(item)
        finally:
            await listener.stop()


class _Listener:
    """One session's caller side: the detector, the ingress windows and the turns."""

    def __init__(self, session: GatewaySession, clock: Clock) -> None:
        self.session = session
        self.clock = clock
        self.detector = SpeechDetector()
        self.turns = 0
        self.speaking: _Turn | None = None
        self.partial_at: float | None = None
        self.window_frames = 0
        self.window_speech = False

    def hear(self, frame: ovp.AudioFrame) -> None:
        now = self.clock.now()
        heard = self.detector.feed(frame, now)
        self.window_frames += 1
        self.window_speech |= self.detector.voiced
        if self.window_frames == _WINDOW_FRAMES:
            self.session.send_audio_ingress(
                window_ms=_WINDOW_FRAMES * ovp.FRAME_MS,
                frames=_WINDOW_FRAMES,
                last_frame_seq=frame.frame_seq,
                speech=self.window_speech,
            )
            self.window_frames, self.window_speech = 0, False
            if self.detector.speaking and not isinstance(heard, SpeechStarted):
                self.partial()
        if isinstance(heard, SpeechStarted):
            self.barge_in()
            self.partial()
        elif isinstance(heard, Utterance):
            self.barge_in()
            self.turns += 1
            first_token_at = now if self.partial_at is None else self.partial_at
            self.partial_at = None
            turn = _Turn(self.turns, heard, first_token_at)
            turn.task = asyncio.create_task(self.answer(turn), name=turn.turn_id)
            self.speaking = turn

    def partial(self) -> None:
        if self.partial_at is None:
            self.partial_at = self.clock.now()
        seconds = self.detector.voiced_frames * ovp.FRAME_MS / 1000
        self.session.send_transcript_partial(
            utterance_id=f"utt_{self.turns + 1}",
            speaker=ovp.Speaker.CALLER,
            text=f"[speech: {seconds:.1f} s so far]",
        )

    def barge_in(self) -> None:
        """Cut the answer being spoken, if there is one."""
        turn, self.speaking = self.speaking, None
        if turn is None or turn.task is None or turn.task.done():
            return
        turn.task.cancel()
        played = turn.frames_sent
        self.session.send_agent_barge_in(
            turn_id=turn.turn_id,
            played_bytes=played * ovp.PCM_BYTES_PER_FRAME,
            played_ms=played * ovp.FRAME_MS,
        )
        self.session.send_audio_flush(cause=ovp.FlushCause.BARGE_IN, turn_id=turn.turn_id)

    async def answer(self, turn: _Turn) -> None:
        """The answer to one utterance (see the module), until done or cut."""
        session, clock, utterance = self.session, self.clock, turn.utterance
        seconds = utterance.speech_ms / 1000
        final_at = clock.now()
        with contextlib.suppress(SessionStateError):  # the session ended under the answer
            session.send_transcript_final(
                utterance_id=f"utt_{turn.number}",
                speaker=ovp.Speaker.CALLER,
                language=LANGUAGE,
                text=f"[{seconds:.1f} s of speech, peak {utterance.peak_dbfs:.0f} dBFS]",
                confidence=1.0,
                words=[],
            )
            text = answer_text(utterance)
            words = text.split(" ")
            llm_at = clock.now()
            for index, word in enumerate(words):
                session.send_agent_thinking(
                    turn_id=turn.turn_id, delta=word if index == 0 else f" {word}"
                )
            session.send_agent_output(turn_id=turn.turn_id, text=text, final=True)
            llm_done_at = tts_at = clock.now()
            pcm = voice(len(words))
            tts_done_at = clock.now()
            first_frame_at = await self.speak(turn, pcm)
            session.send_agent_latency_breakdown(
                turn_id=turn.turn_id,
                stt_first_token_ms=_ms(utterance.started_at, turn.first_token_at),
                stt_final_ms=_ms(utterance.ended_at, final_at),
                llm_first_token_ms=_ms(llm_at, llm_done_at),
                llm_final_ms=_ms(llm_at, llm_done_at),
                tts_first_byte_ms=_ms(tts_at, tts_done_at),
                total_turn_ms=_ms(utterance.ended_at, first_frame_at),
            )
        if self.speaking is turn:
            self.speaking = None

    async def speak(self, turn: _Turn, pcm: bytes) -> float:
        """Send ``pcm`` as frames paced every 20 ms of the clock (on a fixed schedule, so a late
        wake-up does not delay the rest); when the first one went."""
        session, clock = self.session, self.clock
        utterance_id = f"utt_a{turn.number}"
        count = len(pcm) // ovp.PCM_BYTES_PER_FRAME
        began = clock.now()
        for index in range(count):
            if index == count // 2:
                session.send_audio_egress(
                    utterance_id=utterance_id,
                    turn_id=turn.turn_id,
                    bytes_sent=index * ovp.PCM_BYTES_PER_FRAME,
                    final=False,
                )
            chunk = pcm[index * ovp.PCM_BYTES_PER_FRAME : (index + 1) * ovp.PCM_BYTES_PER_FRAME]
            last = index == count - 1
            session.send_audio(chunk, flags=ovp.FLAG_LAST_OF_UTTERANCE if last else 0)
            turn.frames_sent = index + 1
            await clock.sleep(max(0.0, began + (index + 1) * ovp.FRAME_MS / 1000 - clock.now()))
        session.send_audio_egress(
            utterance_id=utterance_id,
            turn_id=turn.turn_id,
            bytes_sent=count * ovp.PCM_BYTES_PER_FRAME,
            final=True,
        )
        return began

    async def stop(self) -> None:
        """The session is over: the answer being spoken, if any, stops."""
        turn, self.speaking = self.speaking, None
        if turn is not None and turn.task is not None:
            turn.task.cancel()
            await asyncio.gather(turn.task, return_exceptions=True)
