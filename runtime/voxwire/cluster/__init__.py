"""Past one process: the replay store and the owner directory, in memory or on Redis.

One process needs none of this: the OVP gateway keeps its replay buffer and the Brisvox agent
side its parked calls in memory, as they always did. Several processes behind a load balancer
share two things through Redis (or Valkey), with the ``voxwire[redis]`` extra:

- :class:`RedisReplayStore`: each OVP session's sent events in a Redis stream, bounded exactly
  like the in-memory buffer (count, bytes, age), so a resume that lands on another process can be
  served from it, or refused when it cannot be served completely;
- :class:`RedisDirectory`: which process owns a live session or a parked call, so a process that
  receives a resume it does not own can relay it to the owner, or refuse it fast when the owner
  is gone.

Both fail closed: a store that lost data, a Redis that cannot be reached, an owner that stopped
sending heartbeats: the resume is refused (``OVP_RESUME_EXPIRED``, Brisvox ``unknown_session``),
never served in part.
"""

from voxwire.cluster._redis import connect as connect_redis
from voxwire.cluster.directory import (
    Directory,
    MemoryDirectory,
    Owner,
    RedisDirectory,
    other_owner,
)
from voxwire.cluster.relay import RelayFailed, RelayResult, relay
from voxwire.cluster.replay import (
    MemoryReplayStore,
    RedisReplayStore,
    Replay,
    ReplayBounds,
    ReplayStore,
    StoreUnavailable,
)

__all__ = [
    "Directory",
    "MemoryDirectory",
    "MemoryReplayStore",
    "Owner",
    "RedisDirectory",
    "RedisReplayStore",
    "RelayFailed",
    "RelayResult",
    "Replay",
    "ReplayBounds",
    "ReplayStore",
    "StoreUnavailable",
    "connect_redis",
    "other_owner",
    "relay",
]
