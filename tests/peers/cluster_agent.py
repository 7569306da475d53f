"""One agent process of a cluster, for tests:
``python -m tests.peers.cluster_agent ID PORT REDIS [--store]``.

An AgentServer with resume on, sharing the owner directory through Redis (and, with
``--store``, the calls' resume state, with an ``on_takeover`` hook); every event its calls see
is printed as one JSON line (``{"process": ID, "session": ..., "event": ..., ...}``): the call's
start (``on_session``), a takeover (``takeover``), each event (its type, and its text or count),
and ``ready`` once it listens; its log goes to standard error. It runs until SIGTERM, which drains it (``drained``, with what the
drain did), or SIGKILL. A port still held by the process it replaces is tried again until free.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys

from voxwire.brisvox.agent import AgentServer, AgentSession, Resumed
from voxwire.cluster import Owner, RedisDirectory, RedisReplayStore, connect_redis
from voxwire.lifecycle import drain_on_signal

TOKEN = "cluster-token"
DRAIN_S = 10.0
BIND_S = 10.0
"""How long a process waits for its port (its predecessor drains and exits meanwhile)."""


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    process_id: str = args.id
    redis = connect_redis(args.redis)
    directory = RedisDirectory(
        redis, Owner(process_id, "127.0.0.1", args.port), heartbeat=0.2, expiry=1.0
    )

    async def follow(session: AgentSession) -> None:
        async for event in session:
            line: dict[str, object] = {"process": process_id, "session": session.id}
            if isinstance(event, Resumed):
                line.update(event="resumed", attempt=event.attempt, seq=event.seq)
            else:
                line.update(event=getattr(event, "type", type(event).__name__))
                if hasattr(event, "text"):
                    line["text"] = event.text
                if hasattr(event, "count"):
                    line["count"] = event.count
            say(**line)

    async def on_session(session: AgentSession) -> None:
        say(process=process_id, session=session.id, event="on_session")
        await follow(session)

    async def on_takeover(session: AgentSession) -> None:
        say(process=process_id, session=session.id, event="takeover")
        await follow(session)

    await directory.start()
    server = AgentServer(
        on_session,
        token=TOKEN,
        port=args.port,
        resume=True,
        directory=directory,
        store=RedisReplayStore(redis, prefix="voxwire:brisvox") if args.store else None,
        on_takeover=on_takeover if args.store else None,
    )
    until = asyncio.get_running_loop().time() + BIND_S
    while True:
        try:
            await server.start()
            break
        except OSError:
            if asyncio.get_running_loop().time() > until:
                raise
            await asyncio.sleep(0.05)
    try:
        say(process=process_id, event="ready")
        drained = await drain_on_signal(server, deadline=DRAIN_S)
        say(process=process_id, event="drained", **dataclasses.asdict(drained))
    finally:
        await server.close()


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cluster_agent")
    parser.add_argument("id")
    parser.add_argument("port", type=int)
    parser.add_argument("redis")
    parser.add_argument("--store", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(arguments(sys.argv[1:])))
