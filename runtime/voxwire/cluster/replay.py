"""The replay store: every event a session sent, bounded, and its resume state, for a resume on
any process.

A :class:`ReplayStore` keeps, per session, the encoded server events in seq order, within the
bounds of the in-memory replay buffer (:class:`ReplayBounds`: at most ``REPLAY_BUFFER_MAX_EVENTS``
events, ``REPLAY_BUFFER_MAX_BYTES`` bytes and ``REPLAY_BUFFER_MAX_AGE_MS`` of age, oldest first).
:meth:`ReplayStore.read_after` answers a resume: every event after ``last_seq``, or ``None``
when the store cannot serve them all (trimmed, lost, expired, or ``last_seq`` ahead of what it
holds). Fail closed: a partial replay is never returned. Beside the events it keeps the session's
resume state (:meth:`ReplayStore.save_state`): the bytes another process needs to take the
session over, opaque to the store (the OVP gateway's and the Brisvox agent's serialized state).

:class:`MemoryReplayStore` is the reference, for one process and for tests;
:class:`RedisReplayStore` keeps one Redis stream per session, appended and trimmed by one script
per append (as Centrifugo's Redis engine does), so count, byte and age bounds are exact under
concurrent writers, plus an epoch that changes whenever Redis lost the store's data.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster._redis import REFUSED, UNAVAILABLE
from voxwire.errors import VoxwireError
from voxwire.ovp.constants import (
    REPLAY_BUFFER_MAX_AGE_MS,
    REPLAY_BUFFER_MAX_BYTES,
    REPLAY_BUFFER_MAX_EVENTS,
    RESUME_WINDOW_MS,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "MemoryReplayStore",
    "RedisReplayStore",
    "Replay",
    "ReplayBounds",
    "ReplayStore",
    "StoreUnavailable",
]


class StoreUnavailable(VoxwireError, ConnectionError):
    """The store could not be reached or answered out of turn; nothing was stored or read."""


@dataclass(frozen=True)
class ReplayBounds:
    """What a session's stored history may hold; the oldest events go first."""

    max_events: int = REPLAY_BUFFER_MAX_EVENTS
    max_bytes: int = REPLAY_BUFFER_MAX_BYTES
    max_age_ms: int = REPLAY_BUFFER_MAX_AGE_MS
    ttl_ms: int = RESUME_WINDOW_MS + REPLAY_BUFFER_MAX_AGE_MS
    """How long a session's history outlives its last append (the store forgets it then)."""


@dataclass(frozen=True)
class Replay:
    """What a resume replays: the events after its ``last_seq``, in order, and the last seq."""

    events: list[bytes]
    last_seq: int


class ReplayStore(Protocol):
    """Where a session's sent events and resume state are kept, for a resume on any process."""

    async def append(self, session_id: str, seq: int, data: bytes) -> None:
        """Store event ``seq`` (greater than any stored for the session) and trim to bounds.

        Raises :class:`StoreUnavailable` when the store cannot be reached.
        """
        ...

    async def extend(
        self, session_id: str, events: Sequence[tuple[int, bytes]], *, state: bytes | None = None
    ) -> None:
        """Store ``events`` (seq, data), in order, as :meth:`append` stores each, and ``state``
        as :meth:`save_state` does, in one call."""
        ...

    async def save_state(self, session_id: str, state: bytes) -> None:
        """Keep ``state`` as the session's resume state (it lives as long as its events)."""
        ...

    async def load_state(self, session_id: str) -> bytes | None:
        """The session's resume state, or None (never saved, forgotten, expired, or lost)."""
        ...

    async def read_after(self, session_id: str, last_seq: int) -> Replay | None:
        """Every event after ``last_seq``, or None when they are not all held."""
        ...

    async def forget(self, session_id: str) -> None:
        """Drop a session's history (it ended and its window closed)."""
        ...


@dataclass
class _History:
    events: deque[tuple[int, bytes, float]] = field(default_factory=deque)
    bytes: int = 0
    last: int = -1
    trimmed: int = -1
    """The highest seq trimmed away: a resume from below it cannot be served."""
    touched: float = 0.0


class MemoryReplayStore:
    """:class:`ReplayStore` in this process's memory: the reference the Redis store matches."""

    def __init__(self, bounds: ReplayBounds = ReplayBounds(), clock: Clock = SYSTEM_CLOCK) -> None:
        self.bounds = bounds
        self._clock = clock
        self._sessions: dict[str, _History] = {}
        self._states: dict[str, tuple[bytes, float]] = {}

    async def append(self, session_id: str, seq: int, data: bytes) -> None:
        now = self._clock.now() * 1000
        history = self._live(session_id, now)
        if history is None:
            # A history that starts later than seq 0 holds nothing before it.
            history = self._sessions[session_id] = _History(trimmed=seq - 1)
        if seq <= history.last:
            raise ValueError(f"session {session_id}: seq {seq} is not after {history.last}")
        history.events.append((seq, data, now))
        history.bytes += len(data)
        history.last = seq
        history.touched = now
        self._trim(history, now)

    async def extend(
        self, session_id: str, events: Sequence[tuple[int, bytes]], *, state: bytes | None = None
    ) -> None:
        for seq, data in events:
            await self.append(session_id, seq, data)
        if state is not None:
            await self.save_state(session_id, state)

    async def save_state(self, session_id: str, state: bytes) -> None:
        self._states[session_id] = (state, self._clock.now() * 1000)

    async def load_state(self, session_id: str) -> bytes | None:
        found = self._states.get(session_id)
        history = self._sessions.get(session_id)
        touched = max(found[1], history.touched if history else 0.0) if found else 0.0
        if found is None or self._clock.now() * 1000 - touched > self.bounds.ttl_ms:
            self._states.pop(session_id, None)
            return None
        return found[0]

    async def read_after(self, session_id: str, last_seq: int) -> Replay | None:
        now = self._clock.now() * 1000
        history = self._live(session_id, now)
        if history is None:
            return None
        self._trim(history, now)
        if last_seq < history.trimmed or last_seq > history.last:
            return None
        return Replay([data for seq, data, _ in history.events if seq > last_seq], history.last)

    async def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._states.pop(session_id, None)

    def _live(self, session_id: str, now: float) -> _History | None:
        history = self._sessions.get(session_id)
        if history is not None and now - history.touched > self.bounds.ttl_ms:
            del self._sessions[session_id]
            return None
        return history

    def _trim(self, history: _History, now: float) -> None:
        b, events = self.bounds, history.events
        while events and (
            len(events) > b.max_events
            or history.bytes > b.max_bytes
            or events[0][2] < now - b.max_age_ms
        ):
            seq, data, _ = events.popleft()
            history.bytes -= len(data)
            history.trimmed = seq


# Redis refuses the stream id 0-0, and OVP's first seq is 0: an event's id is (seq + 1)-0.
# ARGV: now, the bounds, the ttl, the epoch, the resume state ('' for none), then a seq and its
# data for each event, in order.
_APPEND: Final = """
local stream, meta, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local max_events, max_bytes, max_age = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl, epoch, state = tonumber(ARGV[5]), ARGV[6], ARGV[7]
if redis.call('GET', epoch_key) ~= epoch then return redis.error_reply('EPOCH') end
local last = redis.call('HGET', meta, 'last')
if last and redis.call('HGET', meta, 'epoch') ~= epoch then
  -- A history from before the store lost data: it cannot be trusted, start it over.
  redis.call('DEL', stream, meta)
  last = false
end
if not last then
  -- A history that starts later than seq 0 (or that Redis lost) holds nothing before it.
  redis.call('HSET', meta, 'epoch', epoch, 'bytes', 0, 'last', -1, 'trimmed', tonumber(ARGV[8]) - 1)
  last = -1
end
last = tonumber(last)
local bytes = tonumber(redis.call('HGET', meta, 'bytes'))
for i = 8, #ARGV, 2 do
  local seq, data = tonumber(ARGV[i]), ARGV[i + 1]
  if seq <= last then
    redis.call('HSET', meta, 'last', last, 'bytes', bytes)
    return redis.error_reply('SEQ ' .. seq .. ' is not after ' .. last)
  end
  redis.call('XADD', stream, (seq + 1) .. '-0', 'd', data, 't', now)
  last, bytes = seq, bytes + #data
end
redis.call('HSET', meta, 'last', last, 'bytes', bytes)
if state ~= '' then redis.call('HSET', meta, 'state', state) end
local count = redis.call('XLEN', stream)
while count > 0 do
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
  local body, t = first[2][2], tonumber(first[2][4])
  if count > max_events or bytes > max_bytes or t < now - max_age then
    redis.call('XDEL', stream, first[1])
    bytes = redis.call('HINCRBY', meta, 'bytes', -#body)
    redis.call('HSET', meta, 'trimmed', tonumber(string.match(first[1], '^(%d+)')) - 1)
    count = count - 1
  else
    break
  end
end
redis.call('PEXPIRE', stream, ttl)
redis.call('PEXPIRE', meta, ttl)
return count
"""

_SAVE_STATE: Final = """
local stream, meta, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local epoch = redis.call('GET', epoch_key)
if not epoch then return redis.error_reply('EPOCH') end
if redis.call('HGET', meta, 'epoch') ~= epoch then
  -- No history yet, or one from before the store lost data: the state starts it.
  redis.call('DEL', stream, meta)
  redis.call('HSET', meta, 'epoch', epoch)
end
redis.call('HSET', meta, 'state', ARGV[1])
redis.call('PEXPIRE', meta, ARGV[2])
return 1
"""

_LOAD_STATE: Final = """
local epoch = redis.call('GET', KEYS[2])
if not epoch or redis.call('HGET', KEYS[1], 'epoch') ~= epoch then return false end
return redis.call('HGET', KEYS[1], 'state')
"""

_READ: Final = """
local stream, meta, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local after, now, max_age = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local epoch = redis.call('GET', epoch_key)
if not epoch or redis.call('HGET', meta, 'epoch') ~= epoch then return false end
local last = tonumber(redis.call('HGET', meta, 'last'))
local trimmed = tonumber(redis.call('HGET', meta, 'trimmed'))
if after < trimmed or after > last then return false end
local out = {tostring(last)}
for _, entry in ipairs(redis.call('XRANGE', stream, '(' .. (after + 1) .. '-0', '+')) do
  if tonumber(entry[2][4]) < now - max_age then return false end
  out[#out + 1] = entry[2][2]
end
return out
"""


class RedisReplayStore:
    """:class:`ReplayStore` on Redis Streams: one stream and one hash per session.

    ``redis`` is a ``redis.asyncio.Redis`` (with ``decode_responses`` off), best made with
    :func:`voxwire.cluster.connect_redis`, which bounds every call: a resume waits on it.
    :meth:`open` reads or makes the store's epoch.
    Keys live under ``prefix`` (``{prefix}:epoch``, ``{prefix}:replay:{session}`` and
    ``{prefix}:replay-meta:{session}``).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "voxwire:ovp",
        bounds: ReplayBounds = ReplayBounds(),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.bounds = bounds
        self.prefix = prefix
        self.epoch: str | None = None
        self._redis = redis
        self._clock = clock
        self._append = redis.register_script(_APPEND)
        self._read = redis.register_script(_READ)
        self._save_state = redis.register_script(_SAVE_STATE)
        self._load_state = redis.register_script(_LOAD_STATE)

    async def open(self) -> str:
        """Join the store's epoch, making one if Redis has none (a fresh or restarted Redis)."""
        key = f"{self.prefix}:epoch"
        try:
            await self._redis.set(key, secrets.token_hex(8), nx=True)
            epoch = await self._redis.get(key)
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the replay store cannot be reached: {exc}") from exc
        if epoch is None:
            raise StoreUnavailable("the replay store's epoch vanished while it was read")
        self.epoch = epoch.decode() if isinstance(epoch, bytes) else str(epoch)
        return self.epoch

    async def append(self, session_id: str, seq: int, data: bytes) -> None:
        await self.extend(session_id, [(seq, data)])

    async def extend(
        self, session_id: str, events: Sequence[tuple[int, bytes]], *, state: bytes | None = None
    ) -> None:
        """Append ``events`` in one script call (one round trip, atomic): what a gateway sent
        since its last call, each trimmed to the bounds as :meth:`append` does, with the
        session's resume ``state`` beside them."""
        if not events:
            if state is not None:
                await self.save_state(session_id, state)
            return
        epoch = self.epoch if self.epoch is not None else await self.open()
        pairs = [part for seq, data in events for part in (seq, data)]
        b = self.bounds
        for attempt in range(2):
            try:
                await self._append(
                    keys=self._keys(session_id),
                    args=[
                        self._now_ms(),
                        b.max_events,
                        b.max_bytes,
                        b.max_age_ms,
                        b.ttl_ms,
                        epoch,
                        b"" if state is None else state,
                        *pairs,
                    ],
                )
                return
            except UNAVAILABLE as exc:
                raise StoreUnavailable(f"the replay store cannot be reached: {exc}") from exc
            except REFUSED as exc:
                text = str(exc)
                if text.startswith("EPOCH") and attempt == 0:
                    # Redis lost the store's data (a restart without persistence, a failover):
                    # join the epoch it has now (made by this call or another process), under
                    # which every older history is refused.
                    epoch = await self.open()
                    continue
                if text.startswith("SEQ"):
                    raise ValueError(
                        f"session {session_id}: seq {text.removeprefix('SEQ ')}"
                    ) from None
                raise StoreUnavailable(f"the replay store refused an append: {text}") from exc

    async def save_state(self, session_id: str, state: bytes) -> None:
        if self.epoch is None:
            await self.open()
        for attempt in range(2):
            try:
                await self._save_state(
                    keys=self._keys(session_id), args=[state, self.bounds.ttl_ms]
                )
                return
            except REFUSED as exc:
                if str(exc).startswith("EPOCH") and attempt == 0:
                    await self.open()  # Redis lost the store's data: join its new epoch
                    continue
                raise StoreUnavailable(f"the replay store refused a state: {exc}") from exc
            except UNAVAILABLE as exc:
                raise StoreUnavailable(f"the replay store cannot keep a state: {exc}") from exc

    async def load_state(self, session_id: str) -> bytes | None:
        _, meta, epoch = self._keys(session_id)
        try:
            found = await self._load_state(keys=[meta, epoch])
        except (*UNAVAILABLE, REFUSED) as exc:
            raise StoreUnavailable(f"the replay store cannot be read: {exc}") from exc
        return None if found is None else bytes(found)

    async def read_after(self, session_id: str, last_seq: int) -> Replay | None:
        if self.epoch is None:
            await self.open()
        try:
            found = await self._read(
                keys=self._keys(session_id),
                args=[last_seq, self._now_ms(), self.bounds.max_age_ms],
            )
        except (*UNAVAILABLE, REFUSED) as exc:
            raise StoreUnavailable(f"the replay store cannot be read: {exc}") from exc
        if not found:
            return None
        return Replay([bytes(event) for event in found[1:]], int(found[0]))

    async def forget(self, session_id: str) -> None:
        stream, meta, _ = self._keys(session_id)
        try:
            await self._redis.delete(stream, meta)
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the replay store cannot be reached: {exc}") from exc

    def _keys(self, session_id: str) -> list[str]:
        return [
            f"{self.prefix}:replay:{session_id}",
            f"{self.prefix}:replay-meta:{session_id}",
            f"{self.prefix}:epoch",
        ]

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)
