"""One agent process of a cluster, for tests: ``python -m tests.peers.cluster_agent ID PORT REDIS``.

An AgentServer with resume on, sharing the owner directory through Redis; every event its calls
see is printed as one JSON line (``{"process": ID, "session": ..., "event": ..., ...}``), and
``ready`` once it listens. It runs until SIGTERM, which drains it (``drained``, with what the
drain did), or SIGKILL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

from voxwire.brisvox.agent import AgentServer, AgentSession, Resumed
from voxwire.cluster import Owner, RedisDirectory, connect_redis
from voxwire.lifecycle import drain_on_signal

TOKEN = "cluster-token"
DRAIN_S = 10.0


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


async def main(process_id: str, port: int, redis_url: str) -> None:
    directory = RedisDirectory(
        connect_redis(redis_url), Owner(process_id, "127.0.0.1", port), heartbeat=0.2, expiry=1.0
    )

    async def on_session(session: AgentSession) -> None:
        say(process=process_id, session=session.id, event="on_session")
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

    await directory.start()
    async with AgentServer(
        on_session, token=TOKEN, port=port, resume=True, directory=directory
    ) as server:
        say(process=process_id, event="ready")
        drained = await drain_on_signal(server, deadline=DRAIN_S)
        say(process=process_id, event="drained", **dataclasses.asdict(drained))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
