"""One gateway process of a cluster, for tests:
``python -m tests.peers.cluster_gateway ID PORT [--redis URL] [--store] [--events N]
[--interval S]``.

A Gateway (with the owner directory on Redis when ``--redis`` is given, and the replay store and
an ``on_takeover`` hook with ``--store``) whose every session sends ``session.start``, then one
``agent.thinking`` every ``--interval`` seconds (EVENTS of them by default, every 20 ms: seq 1
to EVENTS), then ends, or ends as soon as the client sends a ``dtmf.send`` (its goodbye); it
counts the client's audio frames. A session taken over from another
process goes on from where it stands (its last seq). It prints one JSON line for each thing it
does: ``ready``; ``session`` (a session started), ``takeover`` (taken over, with the seq it
stood at) and ``ended`` (with the audio frames it got), each with the session's id; its log
(relays included) goes to standard error. It runs until SIGTERM, which drains it (within
DRAIN_S; it prints ``drained`` with what the drain did), or SIGKILL. A port still held by the
process it replaces is tried again until it is free.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys

from tests.test_ovp_support import AGENT, CALL, SECRET
from voxwire import ovp
from voxwire.cluster import Directory, Owner, RedisDirectory, RedisReplayStore, connect_redis
from voxwire.lifecycle import drain_on_signal
from voxwire.ovp.gateway import Gateway, GatewaySession

EVENTS = 100
INTERVAL_S = 0.02
DRAIN_S = 10.0
BIND_S = 10.0
"""How long a process waits for its port (its predecessor drains and exits meanwhile)."""


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


def emit(session: GatewaySession, n: int) -> None:
    """One event of the script (the one place that names the send API)."""
    session.send_agent_thinking(turn_id="t1", delta=f"d{n}")


async def listen(gateway: Gateway) -> None:
    """Start ``gateway``, trying again while its port is still taken."""
    loop = asyncio.get_running_loop()
    until = loop.time() + BIND_S
    while True:
        try:
            await gateway.start()
            return
        except OSError:
            if loop.time() > until:
                raise
            await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    process_id: str = args.id
    directory: Directory | None = None
    store = None
    if args.redis:
        redis = connect_redis(args.redis)
        owner = Owner(process_id, "127.0.0.1", args.port)
        cluster = RedisDirectory(redis, owner, heartbeat=0.2, expiry=1.0)
        await cluster.start()
        directory = cluster
        store = RedisReplayStore(redis) if args.store else None

    async def run(session: GatewaySession) -> None:
        frames, goodbye = 0, False

        async def listen_to_the_client() -> None:
            nonlocal frames, goodbye
            async for item in session:
                if isinstance(item, ovp.AudioFrame):
                    frames += 1
                elif isinstance(item, ovp.DtmfSend):
                    goodbye = True

        listening = asyncio.create_task(listen_to_the_client())
        while (n := session.last_seq) < args.events and not goodbye and session.over is None:
            await asyncio.sleep(args.interval)
            if session.over is None:
                emit(session, n)
        if session.over is None:
            session.end(ovp.SessionEndReason.AGENT_ENDED)
        await listening
        say(process=process_id, event="ended", session=session.session_id, frames=frames)

    async def handler(session: GatewaySession) -> None:
        say(process=process_id, event="session", session=session.session_id)
        session.start(CALL, AGENT)
        await run(session)

    async def on_takeover(session: GatewaySession) -> None:
        say(process=process_id, event="takeover", session=session.session_id, at=session.last_seq)
        await run(session)

    gateway = Gateway(
        handler,
        secret=SECRET,
        port=args.port,
        directory=directory,
        store=store,
        on_takeover=on_takeover if store is not None else None,
    )
    await listen(gateway)
    try:
        say(process=process_id, event="ready")
        drained = await drain_on_signal(gateway, deadline=DRAIN_S)
        say(process=process_id, event="drained", **dataclasses.asdict(drained))
    finally:
        await gateway.close()


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cluster_gateway")
    parser.add_argument("id")
    parser.add_argument("port", type=int)
    parser.add_argument("--redis")
    parser.add_argument("--store", action="store_true")
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(arguments(sys.argv[1:])))
