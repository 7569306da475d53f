"""One gateway process of a cluster, for tests:
``python -m tests.peers.cluster_gateway ID PORT [REDIS]``.

A Gateway (with the owner directory on Redis when REDIS is given) whose every session sends
``session.start``, then one ``agent.thinking`` every 20 ms for 2 s (100 events, seq 1 to 100),
then ends. It prints ``ready`` and, for each session it runs, ``session <id>``, one JSON line
each; its log (relays included) goes to standard error. It runs until SIGTERM, which drains it
(within DRAIN_S; it prints ``drained`` with what the drain did), or SIGKILL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys

from tests.test_ovp_support import AGENT, CALL, SECRET
from voxwire import ovp
from voxwire.cluster import Directory, Owner, RedisDirectory, connect_redis
from voxwire.lifecycle import drain_on_signal
from voxwire.ovp.gateway import Gateway, GatewaySession

EVENTS = 100
INTERVAL_S = 0.02
DRAIN_S = 10.0


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


def emit(session: GatewaySession, n: int) -> None:
    """One event of the script (the one place that names the send API)."""
    session.send_agent_thinking(turn_id="t1", delta=f"d{n}")


async def main(process_id: str, port: int, redis_url: str | None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    directory: Directory | None = None
    if redis_url:
        redis = RedisDirectory(
            connect_redis(redis_url),
            Owner(process_id, "127.0.0.1", port),
            heartbeat=0.2,
            expiry=1.0,
        )
        await redis.start()
        directory = redis

    async def handler(session: GatewaySession) -> None:
        say(process=process_id, event="session", session=session.session_id)
        session.start(CALL, AGENT)
        for n in range(EVENTS):
            await asyncio.sleep(INTERVAL_S)
            emit(session, n)
        session.end(ovp.SessionEndReason.AGENT_ENDED)

    async with Gateway(handler, secret=SECRET, port=port, directory=directory) as gateway:
        say(process=process_id, event="ready")
        drained = await drain_on_signal(gateway, deadline=DRAIN_S)
        say(process=process_id, event="drained", **dataclasses.asdict(drained))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
