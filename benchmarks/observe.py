"""``python -m benchmarks.observe``: what feeding a session's statistics costs per input.

Every role feeds its session's :class:`~voxwire.observe.stats.SessionStats` with each message
and audio frame it sends and reads; this measures that feed alone, as a role makes it: an OVP
call's audio (a frame every 20 ms), a stream of server events (one every 2 ms, each an answer
the statistics read, as Brisvox bot text deltas are), and each beside the same loop without the
feed. The machines are shared and noisy: each figure is the best of ``rounds`` rounds.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from dataclasses import dataclass

from voxwire import ovp
from voxwire.observe.stats import SessionStats

__all__ = ["FeedCost", "measure"]

_TEXT = (
    '{"type":"agent.thinking","seq":%d,"session_id":"ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0",'
    '"ts":"2026-05-14T12:34:57.900Z","turn_id":"turn_1","delta":"We"}'
)


@dataclass(frozen=True)
class FeedCost:
    """Nanoseconds one input adds, by kind."""

    frame_ns: float
    message_ns: float


def _best(run: Callable[[], None], rounds: int) -> float:
    return min(timeit.repeat(run, number=1, repeat=rounds))


def measure(inputs: int = 15_000, rounds: int = 7) -> FeedCost:
    """The cost of one frame and of one message fed, over ``inputs`` of each (5 minutes of
    audio one way by default), less the loop's own."""
    pcm = bytes(640)
    frames = [
        ovp.AudioFrame(direction=0, frame_seq=i, rtp_timestamp=320 * i, pcm=pcm)
        for i in range(inputs)
    ]
    messages = [ovp.decode(_TEXT % i, "server") for i in range(inputs)]
    turn = ovp.decode(
        _TEXT.replace("agent.thinking", "transcript.final").replace(
            '"turn_id":"turn_1","delta":"We"',
            '"utterance_id":"u","speaker":"caller","language":"en","text":"Hi",'
            '"confidence":0.9,"words":[]',
        )
        % 0,
        "server",
    )

    def bare() -> None:
        for i in range(inputs):
            (frames[i], 1.0 + i * 0.02)

    def fed_frames() -> None:
        feed = SessionStats.of("ovp", own="server").on_frame
        for i in range(inputs):
            feed("client", frames[i], 1.0 + i * 0.02)

    def fed_messages() -> None:
        stats = SessionStats.of("ovp", own="client")
        stats.on_message("server", turn, 0.5, size=100)  # a turn waits: each delta is read
        feed = stats.on_message
        for i in range(inputs):
            feed("server", messages[i], 1.0 + i * 0.002, size=120)

    base = _best(bare, rounds)
    return FeedCost(
        frame_ns=(_best(fed_frames, rounds) - base) / inputs * 1e9,
        message_ns=(_best(fed_messages, rounds) - base) / inputs * 1e9,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observe", description=__doc__)
    parser.add_argument("--inputs", type=int, default=15_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    cost = measure(args.inputs, args.rounds)
    print(f"per audio frame: {cost.frame_ns:,.0f} ns; per message: {cost.message_ns:,.0f} ns")


if __name__ == "__main__":
    main()
