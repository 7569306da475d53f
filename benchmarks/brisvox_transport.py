"""How many Brisvox events per second the engine side delivers to an agent, against bare websockets.

The agent runs in a child process (a core of its own), as the servers of ``benchmarks.transport``
do; this process is the engine. Both contenders carry the same call events, the event messages of
``corpus.brisvox_server_corpus`` (bot text deltas mostly, transcripts, turns):

- voxwire: an :class:`~voxwire.brisvox.engine.EngineLink` sends the decoded, typed events
  (stamped with ``seq`` and ``t_ms``, encoded and checked when written) to an
  :class:`~voxwire.brisvox.agent.AgentServer` whose handler iterates its session and counts the
  events (decoded and checked by the agent's core, queued for the handler);
- bare: a ``websockets`` client sends the corpus's pre-encoded texts to a ``websockets`` server
  that counts the text messages.

A round is one call (one connection): the clock starts after the handshake and stops when the
child reports how many events it received, after the call's end (``session.end``, or a final
marker for the bare pair). Every count is checked against what was sent, so a loss shows, and
the rate is of events delivered: an event dropped on the way (by either side's bounded queue)
does not count. The
engine side never waits for the agent (``send_event`` queues at most ``LinkSettings.event_queue``
events and drops the newest past it), so the sender hands over half a queue at a time and yields
until the link has written it.

Loopback only, and bounded: ``events`` per round, sending stops after ``SEND_BOUND_S`` in any
case, each round has ``ROUND_TIMEOUT_S`` and each child stops by itself after
``CHILD_LIFETIME_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from itertools import cycle, islice
from typing import TypeGuard, get_args

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from benchmarks.corpus import brisvox_server_corpus
from benchmarks.timing import run
from voxwire.brisvox.agent import AgentServer, AgentSession, EventsDropped
from voxwire.brisvox.codec import decode
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.brisvox.engine_core import LinkSettings
from voxwire.brisvox.messages import Event, EventsLost
from voxwire.hosts import check_url

__all__ = ["Throughput", "brisvox_transport_table", "run_brisvox_transport_benchmark"]

TOKEN = "benchmark-token-for-the-loopback-agent"
CHILD_LIFETIME_S = 600.0
ROUND_TIMEOUT_S = 60.0
SEND_BOUND_S = 10.0
WARMUP_EVENTS = 500
END_MARKER = "end"
"""What the bare client sends last (not JSON, so never an event)."""
EVENT_TYPES: tuple[type, ...] = get_args(Event)
"""The 13 subscribable call events."""
NAMES = {"voxwire": "voxwire EngineLink to AgentServer", "bare": "bare websockets pair"}


@dataclass(frozen=True)
class Throughput:
    """One implementation's median round: ``events`` sent, ``received`` counted by the agent."""

    name: str
    events: int
    received: int
    seconds: float
    rounds: int
    lost: int
    """Events sent but not received, over all the rounds (0 unless something was dropped)."""

    @property
    def per_second(self) -> float:
        """Events delivered to the agent per second: a dropped event does not count."""
        return self.received / self.seconds if self.seconds > 0 else 0.0


def _is_event(message: object) -> TypeGuard[Event]:
    return isinstance(message, EVENT_TYPES)


@dataclass(frozen=True)
class _Round:
    sent: int
    received: int
    seconds: float


def _corpus() -> tuple[list[Event], list[str]]:
    """The call events of the server corpus: typed (for voxwire) and as their texts (bare)."""
    typed: list[Event] = []
    texts: list[str] = []
    for text in brisvox_server_corpus(2000):
        message = decode(text, "server")
        if _is_event(message):
            typed.append(message)
            texts.append(text)
    return typed, texts


# -- the agents (child processes) --------------------------------------------------------------


async def _serve_agent() -> None:
    async def count(session: AgentSession) -> None:
        received = reported_lost = 0
        async for event in session:
            if _is_event(event):
                received += 1
            elif isinstance(event, EventsDropped | EventsLost):
                reported_lost += event.count
        print(received, reported_lost, flush=True)

    async with AgentServer(count, token=TOKEN) as server:
        print(server.port, flush=True)
        await asyncio.sleep(CHILD_LIFETIME_S)


async def _serve_bare() -> None:
    async def count(ws: ServerConnection) -> None:
        received = 0
        async for message in ws:
            if message == END_MARKER:
                break
            if isinstance(message, str):
                received += 1
        print(received, 0, flush=True)

    async with serve(count, "127.0.0.1", 0, compression=None, max_size=2**16) as server:
        print(next(iter(server.sockets)).getsockname()[1], flush=True)
        await asyncio.sleep(CHILD_LIFETIME_S)


# -- the engine (this process) -----------------------------------------------------------------


async def _report(child: asyncio.subprocess.Process) -> int:
    """The next call's count of received events, as the child prints it."""
    assert child.stdout is not None
    line = await child.stdout.readline()
    if not line:
        raise RuntimeError("the benchmark agent exited")
    return int(line.split()[0])


async def _voxwire_round(
    child: asyncio.subprocess.Process, port: int, events: list[Event], index: int
) -> _Round:
    target = AgentTarget(check_url(f"ws://127.0.0.1:{port}"), TOKEN)
    link = EngineLink(target, session_id=f"bench-{index}", agent="bench")
    if not await link.start():
        await link.close()
        raise RuntimeError(f"the benchmark agent did not take the call: {link.core.state}")
    batch = max(1, LinkSettings().event_queue // 2)
    began = time.perf_counter()
    sent = 0
    try:
        for event in events:
            link.send_event(event)
            sent += 1
            if sent % batch == 0:
                while link.pending:  # let the writer hand the batch to the socket
                    await asyncio.sleep(0)
                if time.perf_counter() - began > SEND_BOUND_S:
                    break
        ending = asyncio.ensure_future(link.end("hangup"))
        received = await _report(child)
        seconds = time.perf_counter() - began
        await ending
    finally:
        await link.close()
    return _Round(sent, received, seconds)


async def _bare_round(child: asyncio.subprocess.Process, port: int, texts: list[str]) -> _Round:
    async with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=2**16) as ws:
        began = time.perf_counter()
        sent = 0
        for text in texts:
            await ws.send(text)
            sent += 1
            if sent % 128 == 0 and time.perf_counter() - began > SEND_BOUND_S:
                break
        await ws.send(END_MARKER)
        received = await _report(child)
        seconds = time.perf_counter() - began
    return _Round(sent, received, seconds)


async def _spawn(mode: str) -> tuple[asyncio.subprocess.Process, int]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.brisvox_transport", mode, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    return child, int(await child.stdout.readline())


def _summary(name: str, rounds: list[_Round]) -> Throughput:
    rates = [r.received / r.seconds for r in rounds]
    median = rounds[rates.index(statistics.median_low(rates))]
    lost = sum(r.sent - r.received for r in rounds)
    return Throughput(name, median.sent, median.received, median.seconds, len(rounds), lost)


async def _run(events: int, rounds: int) -> list[Throughput]:
    typed, texts = _corpus()
    typed_events = list(islice(cycle(typed), events))
    text_events = list(islice(cycle(texts), events))
    children: list[asyncio.subprocess.Process] = []
    try:
        agent, agent_port = await _spawn("agent")
        children.append(agent)
        bare, bare_port = await _spawn("bare")
        children.append(bare)
        measured: dict[str, list[_Round]] = {"voxwire": [], "bare": []}
        async with asyncio.timeout(ROUND_TIMEOUT_S):  # warm up: imports, caches, first connections
            await _voxwire_round(agent, agent_port, typed_events[:WARMUP_EVENTS], 0)
            await _bare_round(bare, bare_port, text_events[:WARMUP_EVENTS])
        for index in range(1, rounds + 1):  # interleaved, in a new order each round
            order = ["voxwire", "bare"] if index % 2 else ["bare", "voxwire"]
            for name in order:
                async with asyncio.timeout(ROUND_TIMEOUT_S):
                    if name == "voxwire":
                        measured[name].append(
                            await _voxwire_round(agent, agent_port, typed_events, index)
                        )
                    else:
                        measured[name].append(await _bare_round(bare, bare_port, text_events))
        return [_summary(name, measured[name]) for name in ("voxwire", "bare")]
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


def run_brisvox_transport_benchmark(events: int, rounds: int) -> list[Throughput]:
    """voxwire's engine-to-agent link, then the bare websockets pair: the median of ``rounds``
    interleaved rounds of ``events`` events each."""
    return run(_run(events, rounds))


def brisvox_transport_table(results: list[Throughput]) -> str:
    """The markdown table of a run (``vs bare``: events per second over the bare pair's)."""
    bare = next(r for r in results if r.name == "bare").per_second
    rounds = results[0].rounds if results else 0
    lines = [
        f"## Brisvox events per second, engine to agent (median of {rounds} rounds)",
        "",
        "| implementation | events sent | seconds | events delivered per second | vs bare | lost |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ratio = r.per_second / bare if bare else 0.0
        lines.append(
            f"| {NAMES[r.name]} | {r.events:,} | {r.seconds:.3f} | {r.per_second:,.0f} | "
            f"{ratio:.2f}x | {r.lost} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run({"agent": _serve_agent, "bare": _serve_bare}[sys.argv[1]]())
