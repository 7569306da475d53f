"""The owner directory: which process holds a live session or a parked call.

A process that owns a session records itself as its owner (:meth:`Directory.claim`) and keeps
a heartbeat of its own: a process entry with its address that expires unless refreshed. A
process that receives a resume it does not own looks the owner up (:meth:`Directory.lookup`):
an owner whose heartbeat stopped is no owner, so a resume for a session of a dead process is
refused at once instead of waiting on it.

An ownership is a lease: the owner entry expires with the process entry (seconds, not the
session's life) and every heartbeat renews it, so the entries of a dead process vanish within
the expiry, and the owners return within one heartbeat after Redis lost its data (a restart, a
failover, an eviction). Each claim carries a fencing token, one more than the session's last:
a renewal finds the entry held by another claim (a takeover) and gives the session up instead
of writing over it, and :meth:`RedisDirectory.holds` then says so, so a stale owner stops.

:class:`MemoryDirectory` serves one process (every lookup is of itself, or nobody);
:class:`RedisDirectory` shares the directory through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, cast

from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster._redis import REFUSED, UNAVAILABLE
from voxwire.cluster.replay import StoreUnavailable

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "LOOKUP_BUDGET_S",
    "REMEMBER_S",
    "RENEW_BATCH",
    "Directory",
    "MemoryDirectory",
    "Owner",
    "RedisDirectory",
    "other_owner",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

HEARTBEAT_S: Final = 1.0
"""How often a process refreshes its entry."""
PROCESS_EXPIRY_S: Final = 3.0
"""A process whose entry was not refreshed for this long is taken for dead."""
LOOKUP_BUDGET_S: Final = 1.0
"""The longest (real seconds) a resume waits on the directory before it is refused, whatever
Redis does: within the Brisvox engine's 2 s handshake bound, with room for the answer."""
REMEMBER_S: Final = 600.0
"""How long the cluster remembers that a session started (:meth:`Directory.seen`): longer than
any resume of it can come (an OVP token lives 300 s, and 30 s of clock leeway each way)."""
_SKEW_MS: Final = 5000
"""How far apart the processes' wall clocks may be (each heartbeat reads again what was added to
the list of started sessions this long before the newest entry it read)."""


@dataclass(frozen=True)
class Owner:
    """A process that owns sessions: its id and the address its relay listens on."""

    process_id: str
    host: str
    port: int


class Directory(Protocol):
    """Who owns which session, and whether that owner is alive."""

    @property
    def me(self) -> Owner: ...

    async def claim(self, protocol: str, session_id: str, ttl: float | None = None) -> int:
        """Record this process as the owner of ``session_id`` until :meth:`release` (or for
        ``ttl`` seconds at most); the fencing token of this claim."""
        ...

    async def release(self, protocol: str, session_id: str) -> None:
        """Forget the entry, if it is still this process's."""
        ...

    async def lookup(self, protocol: str, session_id: str) -> Owner | None:
        """The live owner of ``session_id``, or None (nobody, or an owner that stopped)."""
        ...

    def watch(self, protocol: str) -> None:
        """Keep track of the sessions of ``protocol`` started anywhere (for :meth:`seen`)."""
        ...

    def seen(self, protocol: str, session_id: str) -> bool:
        """Whether ``session_id`` started on some process in the last :data:`REMEMBER_S`, as
        far as this process has heard (no round trip: a watched protocol is read with each
        heartbeat). A connection for a session seen is a resume, never a new session."""
        ...


async def other_owner(
    directory: Directory, protocol: str, session_id: str, *, budget: float = LOOKUP_BUDGET_S
) -> Owner | None:
    """The live owner of ``session_id`` when it is another process: None when it is this one,
    nobody, or the directory cannot be read within ``budget`` real seconds (logged; the caller
    goes on as one process)."""
    try:
        async with asyncio.timeout(budget):
            owner = await directory.lookup(protocol, session_id)
    except TimeoutError:
        _log.warning("session %s: the owner directory did not answer in %g s", session_id, budget)
        return None
    except StoreUnavailable as exc:
        _log.warning("session %s: the owner directory cannot be read: %s", session_id, exc)
        return None
    if owner is None or owner.process_id == directory.me.process_id:
        return None
    return owner


class MemoryDirectory:
    """:class:`Directory` of one process: it owns what it claimed, and nobody else exists."""

    def __init__(self, me: Owner) -> None:
        self._me = me
        self._claimed: set[tuple[str, str]] = set()
        self._fences: dict[tuple[str, str], int] = {}

    @property
    def me(self) -> Owner:
        return self._me

    async def claim(self, protocol: str, session_id: str, ttl: float | None = None) -> int:
        key = (protocol, session_id)
        self._claimed.add(key)
        self._fences[key] = self._fences.get(key, 0) + 1
        return self._fences[key]

    async def release(self, protocol: str, session_id: str) -> None:
        self._claimed.discard((protocol, session_id))

    async def lookup(self, protocol: str, session_id: str) -> Owner | None:
        return self._me if (protocol, session_id) in self._claimed else None

    def watch(self, protocol: str) -> None:
        pass  # one process: what it started, it holds (or knows as ended)

    def seen(self, protocol: str, session_id: str) -> bool:
        return (protocol, session_id) in self._fences


_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""Delete an owner entry only while it is this claim's (compare and delete, atomically)."""

_CLAIM: Final = """
local fence = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. '/' .. fence, 'PX', ARGV[2])
if fence == 1 then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[4] - ARGV[6])
end
return fence
"""
"""Take the next fencing token of the session and write the owner entry with it; the first claim
of a session adds it to the protocol's sessions started (scored with the wall clock in ms), and
forgets those started longer ago than the cluster remembers."""

_LOOKUP: Final = """
local held = redis.call('GET', KEYS[1])
if not held then return false end
local process = string.match(held, '^(.*)/%d+$')
local entry = redis.call('GET', KEYS[2] .. process)
if not entry then return false end
return {process, entry}
"""
"""The owner of a session and its address, in one round trip (false: nobody, or gone)."""

_RENEW: Final = """
local lost = {}
for i, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held == false or held == ARGV[i + 1] then
    redis.call('SET', key, ARGV[i + 1], 'PX', ARGV[1])
  else
    table.insert(lost, i)
  end
end
return lost
"""
"""Renew every lease of this process: write back an entry Redis lost, leave one another claim
took (returning its position, 1-based)."""

RENEW_BATCH: Final = 512
"""Most leases one renewal script call carries (a process with more renews them in several
calls per heartbeat, so no one call holds Redis for long)."""

_FENCE_LIFETIME_MS: Final = 24 * 3600 * 1000
"""How long a session's fencing counter outlives its last claim (real milliseconds)."""


@dataclass
class _Lease:
    protocol: str
    session_id: str
    value: str
    """``{process_id}/{fence}``: what the owner entry holds while this claim owns it."""
    until: float | None
    """When the claim ends on the directory's clock (``ttl``), or None: until released."""


class RedisDirectory:
    """:class:`Directory` shared through Redis; :meth:`start` begins the heartbeat.

    Keys: ``{prefix}:process:{id}`` (the address, expiring after ``expiry`` seconds unless the
    heartbeat refreshes it), ``{prefix}:owner:{protocol}:{session}`` (``{process_id}/{fence}``,
    a lease of the same expiry the heartbeat renews) and ``{prefix}:fence:{protocol}:{session}``
    (the session's last fencing token). Every time (the heartbeat, the expiry, a claim's ``ttl``)
    is seconds of ``clock``; Redis is told how long that is in real time. The primitives are
    plain ``SET PX``, ``INCR`` and short Lua scripts (``EVALSHA``), which Redis and Valkey run
    alike, each atomically; the keys of one call are on one server (no Redis Cluster slots).
    """

    def __init__(
        self,
        redis: Redis,
        me: Owner,
        *,
        prefix: str = "voxwire",
        heartbeat: float = HEARTBEAT_S,
        expiry: float = PROCESS_EXPIRY_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not 0 < heartbeat < expiry:
            raise ValueError(f"the heartbeat ({heartbeat} s) must be shorter than the expiry")
        self._redis = redis
        self._me = me
        self._prefix = prefix
        self._heartbeat = heartbeat
        self._expiry = expiry
        self._clock = clock
        self._release = redis.register_script(_RELEASE)
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._lookup = redis.register_script(_LOOKUP)
        self._leases: dict[str, _Lease] = {}
        self._task: asyncio.Task[None] | None = None
        self._watched: dict[str, float] = {}
        """Each watched protocol, with the newest start read of it (wall clock, ms)."""
        self._seen: dict[tuple[str, str], float] = {}
        self._seen_order: deque[tuple[float, tuple[str, str]]] = deque()

    @property
    def me(self) -> Owner:
        return self._me

    async def start(self) -> None:
        """Write this process's entry, then keep it fresh from a task until :meth:`close`.

        A Redis that cannot be reached does not stop the process: the heartbeat keeps trying,
        logged, and meanwhile this process's sessions are its own alone (a resume landing
        elsewhere is refused there), while new sessions work as on one process.
        """
        try:
            await self._beat()
        except StoreUnavailable as exc:
            _log.warning("owner directory heartbeat failed: %s", exc)
        self._task = asyncio.create_task(self._run(), name=f"heartbeat {self._me.process_id}")

    async def close(self) -> None:
        """Stop the heartbeat and remove this process's entry: its sessions have no owner now."""
        task, self._task = self._task, None
        if task is not None:
            # The loop ends at its next turn even when the redis client swallowed the cancel
            # (it may turn a cancel in the middle of a call into a connection error).
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(*UNAVAILABLE, REFUSED):
            await self._redis.delete(self._process_key(self._me.process_id))

    async def claim(self, protocol: str, session_id: str, ttl: float | None = None) -> int:
        """Own ``session_id`` from now (taking it over from any other owner) until
        :meth:`release`, or for ``ttl`` seconds of the clock at most: a lease the heartbeat
        renews. The claim's fencing token, one more than the session's last."""
        key = self._owner_key(protocol, session_id)
        fence_key = f"{self._prefix}:fence:{protocol}:{session_id}"
        args: list[str | int | float] = [
            self._me.process_id,
            self._real_ms(self._expiry),
            _FENCE_LIFETIME_MS,
            int(time.time() * 1000),
            session_id,
            int(REMEMBER_S * 1000),
        ]
        keys = [key, fence_key, self._started_key(protocol)]
        fence = int(await self._call(self._claim(keys=keys, args=args)))
        until = None if ttl is None else self._clock.now() + ttl
        self._leases[key] = _Lease(protocol, session_id, f"{self._me.process_id}/{fence}", until)
        return fence

    async def release(self, protocol: str, session_id: str) -> None:
        key = self._owner_key(protocol, session_id)
        lease = self._leases.pop(key, None)
        if lease is not None:
            await self._call(self._release(keys=[key], args=[lease.value]))

    def holds(self, protocol: str, session_id: str) -> bool:
        """Whether this process still owns ``session_id``: claimed, not released, not past its
        ``ttl``, and not taken by a later claim (found at the last renewal)."""
        lease = self._leases.get(self._owner_key(protocol, session_id))
        return lease is not None and (lease.until is None or self._clock.now() < lease.until)

    async def lookup(self, protocol: str, session_id: str) -> Owner | None:
        keys = [self._owner_key(protocol, session_id), self._process_key("")]
        found = await self._call(self._lookup(keys=keys))
        if not found:
            return None  # nobody, or an owner whose heartbeat stopped: the process is gone
        process, entry = (_text(part) for part in found)
        address = json.loads(entry)
        return Owner(process, str(address["host"]), int(address["port"]))

    def watch(self, protocol: str) -> None:
        """Read the sessions of ``protocol`` started anywhere with every heartbeat from now on."""
        self._watched.setdefault(protocol, 0.0)

    def seen(self, protocol: str, session_id: str) -> bool:
        return (protocol, session_id) in self._seen or (
            self._owner_key(protocol, session_id) in self._leases
        )

    async def _run(self) -> None:
        while self._task is not None:
            await self._clock.sleep(self._heartbeat)
            try:
                await self._beat()
            except StoreUnavailable as exc:
                # Logged and retried: the entry expires if Redis stays away, and lookups by
                # other processes then refuse this process's sessions, as they must.
                _log.warning("owner directory heartbeat failed: %s", exc)

    async def _beat(self) -> None:
        """Refresh this process's entry and renew its leases (writing back what Redis lost)."""
        entry = json.dumps({"host": self._me.host, "port": self._me.port})
        key = self._process_key(self._me.process_id)
        await self._call(self._redis.set(key, entry, px=self._real_ms(self._expiry)))
        for protocol in list(self._watched):
            await self._read_started(protocol)
        now = self._clock.now()
        for owner_key in [
            k for k, v in self._leases.items() if v.until is not None and now >= v.until
        ]:
            del self._leases[owner_key]  # its ttl passed: Redis lets the entry expire
        if not self._leases:
            return
        held = list(self._leases)
        expiry = self._real_ms(self._expiry)
        for start in range(0, len(held), RENEW_BATCH):
            # Claims and releases go on between the batches: each batch takes the leases as
            # they are when it is sent.
            leases = [
                (k, self._leases[k]) for k in held[start : start + RENEW_BATCH] if k in self._leases
            ]
            keys = [k for k, _ in leases]
            values = [lease.value for _, lease in leases]
            lost = await self._call(self._renew(keys=keys, args=[expiry, *values]))
            self._give_up([leases[int(position) - 1] for position in lost])

    async def _read_started(self, protocol: str) -> None:
        """Add what was added to ``protocol``'s sessions started since the last read (and a
        little before, for the clocks' skew); forget those the cluster no longer remembers."""
        newest = self._watched[protocol]
        low = f"({newest - _SKEW_MS}" if newest else "-inf"
        started = await self._call(
            self._redis.zrangebyscore(self._started_key(protocol), low, "+inf", withscores=True)
        )
        for member, score in cast("list[tuple[bytes, float]]", started):
            key = (protocol, _text(member))
            if key not in self._seen:
                self._seen_order.append((score, key))
            self._seen[key] = score
            newest = max(newest, score)
        self._watched[protocol] = newest
        cutoff, order = (time.time() - REMEMBER_S) * 1000, self._seen_order
        while order and order[0][0] < cutoff:
            _, key = order.popleft()
            self._seen.pop(key, None)

    def _give_up(self, lost: list[tuple[str, _Lease]]) -> None:
        """Forget the leases another claim took, unless this process claimed again since."""
        for key, lease in lost:
            if self._leases.get(key) is lease:
                gone = self._leases.pop(key)
                _log.warning(
                    "%s session %s was claimed by another process: this one gives it up",
                    gone.protocol,
                    gone.session_id,
                )

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except (*UNAVAILABLE, REFUSED) as exc:
            raise StoreUnavailable(f"the owner directory cannot be reached: {exc}") from exc

    def _real_ms(self, seconds: float) -> int:
        """``seconds`` of the clock as the real milliseconds Redis expires keys in (at least 1)."""
        return max(1, int(self._clock.real_seconds(seconds) * 1000))

    def _owner_key(self, protocol: str, session_id: str) -> str:
        return f"{self._prefix}:owner:{protocol}:{session_id}"

    def _process_key(self, process_id: str) -> str:
        return f"{self._prefix}:process:{process_id}"

    def _started_key(self, protocol: str) -> str:
        return f"{self._prefix}:started:{protocol}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
