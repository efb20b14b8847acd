"""Rate limits shared by every server process and instance through Redis, and the per-assignment
request rates of the worker API.

Without ``[server] redis_url`` each limit counts in its own process, as it always did
(:class:`server.paradigms.entry.EntryLimiter`, :class:`server.paradigms.entry.AdmissionGate`,
:class:`server.login_throttle.LoginThrottle`, :class:`RequestRate`): N gunicorn processes allow N
times each limit, and a restart forgets every count. With ``redis_url`` (or
``PERCEPTLAB_SERVER_REDIS_URL``) the same decisions are taken on counts in Redis, shared by all
processes and instances and kept across restarts:

* each decision is one Lua script, run atomically by Redis in one round trip: the check and the
  count cannot be split by a concurrent request (no read-then-write race between processes), and
  the script's arithmetic is that of the in-process class it replaces, so both behave alike;
* time is the Redis server's own clock (``TIME``: one clock for every instance, whatever their
  hosts' clocks say), or the app's injected clock when it has one (tests);
* keys carry ``[server] redis_prefix`` (two deployments may share one Redis) and expire with the
  counts they hold: nothing needs cleaning up;
* when Redis cannot be reached (a timeout of :data:`REDIS_TIMEOUT_S`) the limit falls back to its
  in-process twin for :data:`RETRY_AFTER_S` seconds and says so in the log once: a Redis outage
  weakens the limits to per process, it never stops a worker's study or an experimenter's login.

Why redis-py with scripts and not Flask-Limiter: Flask-Limiter decorates routes with fixed
"N per period" strings. The limits here are decisions inside a request (an address is asked
without counting before the admission gate; an entry by a signed link skips the address; a login
counts a failure first and refunds it; failures double a delay; the admission gate promises retry
slots one interval apart), none of which its strategies express.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .login_throttle import ACCOUNT, CLIENT, DEVICE, FORGET_AFTER, MAX_USERNAMES_PER_CLIENT, USERNAME_WINDOW
from .login_throttle import LoginThrottle, client_key

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 0.5   # a Redis that does not answer in this time counts as down
RETRY_AFTER_S = 10.0    # ... and is asked again after this long (meanwhile: the in-process limits)
DEFAULT_PREFIX = "perceptlab:"

# Every script reads the time from ARGV[1]: the caller's clock when it sends one, else Redis's own.
_NOW = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local function fmt(x) return string.format('%.6f', x) end
"""

# EntryLimiter.admit: a sliding window of entry times per address (a sorted set scored by time).
_ENTRY = _NOW + """
local limit, window, count = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], n - limit, n - limit, 'WITHSCORES')
  return fmt(math.max(1.0, tonumber(oldest[2]) + window - now))
end
if count then
  redis.call('ZADD', KEYS[1], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
end
return '0'
"""

# AdmissionGate.admit: a token bucket (GCRA) whose deferred callers are promised slots one interval apart.
_ADMISSION = _NOW + """
local rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local interval, horizon = 1 / rate, burst / rate
local state = redis.call('HMGET', KEYS[1], 'next_free', 'promised')
local next_free = tonumber(state[1]) or -math.huge
local promised = tonumber(state[2]) or -math.huge
local start = math.max(next_free, now)
local wait = 0
if start + interval <= now + horizon then
  next_free = start + interval
  redis.call('HSET', KEYS[1], 'next_free', fmt(next_free))
else
  promised = math.max(promised + interval, start + interval - horizon)
  redis.call('HSET', KEYS[1], 'promised', fmt(promised))
  wait = math.max(promised - now, 1e-3)
end
redis.call('PEXPIRE', KEYS[1], math.ceil((math.max(next_free, promised, now) - now + horizon + 60) * 1000))
return fmt(wait)
"""

# RequestRate.admit: GCRA, one "theoretical arrival time" per key.
_RATE = _NOW + """
local interval, burst = 1 / tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now) + interval
local over = tat - now - burst * interval
if over > 0 then return fmt(over) end
redis.call('SET', KEYS[1], fmt(tat), 'PX', math.ceil((tat - now) * 1000) + 1000)
return '0'
"""

# LoginThrottle.acquire / .succeeded: failure records {failures, last} per key, a client's failed
# usernames in a sorted set. Rules arrive as ARGV triples (free, base, cap).
_LOGIN_COMMON = _NOW + """
local forget = tonumber(ARGV[2])
local function record(key)
  local r = redis.call('HMGET', key, 'failures', 'last')
  local failures, last = tonumber(r[1]) or 0, tonumber(r[2])
  if last and now - last >= forget then return 0, nil end
  return failures, last
end
local function wait(key, free, base, cap)
  local failures, last = record(key)
  if failures == 0 or not last or failures < free then return 0 end
  return math.max(0, last + math.min(cap, base * 2 ^ math.min(failures - free, 64)) - now)
end
local function count(key)
  local failures = record(key)
  redis.call('HSET', key, 'failures', failures + 1, 'last', fmt(now))
  redis.call('EXPIRE', key, math.ceil(forget))
end
"""
_LOGIN_ACQUIRE = _LOGIN_COMMON + """
-- KEYS: account, client, client's usernames, device ('' = none); ARGV[3..11]: rules account, client, device;
-- ARGV[12]: usernames per client, ARGV[13]: their window, ARGV[14]: the account name
local r = {}
for i = 3, 11 do r[#r + 1] = tonumber(ARGV[i]) end
if KEYS[4] ~= '' then
  local w = wait(KEYS[4], r[7], r[8], r[9])
  if w <= 0 then count(KEYS[4]) end
  return fmt(w)
end
local users, most, span, account = KEYS[3], tonumber(ARGV[12]), tonumber(ARGV[13]), ARGV[14]
redis.call('ZREMRANGEBYSCORE', users, '-inf', now - span)
local spray = 0
if not redis.call('ZSCORE', users, account) and redis.call('ZCARD', users) >= most then
  local oldest = redis.call('ZRANGE', users, 0, 0, 'WITHSCORES')
  spray = tonumber(oldest[2]) + span - now
end
local w = math.max(wait(KEYS[1], r[1], r[2], r[3]), wait(KEYS[2], r[4], r[5], r[6]), spray)
if w <= 0 then
  count(KEYS[1])
  count(KEYS[2])
  redis.call('ZADD', users, now, account)
  redis.call('EXPIRE', users, math.ceil(span))
end
return fmt(w)
"""
_LOGIN_SUCCEEDED = _LOGIN_COMMON + """
-- KEYS: account, client, client's usernames, device ('' = none); ARGV[3]: the account name
if KEYS[4] ~= '' then
  redis.call('DEL', KEYS[4])
  return '0'
end
redis.call('DEL', KEYS[1])
local failures = tonumber(redis.call('HGET', KEYS[2], 'failures'))
if failures and failures > 0 then redis.call('HSET', KEYS[2], 'failures', failures - 1) end
redis.call('ZREM', KEYS[3], ARGV[3])
return '0'
"""


class SharedStore:
    """One Redis connection pool (thread-safe) with the scripts, and the switch to in-process limits
    while Redis is unreachable.

    Parameters
    ----------
    url : str
        ``redis://[:password@]host:port/db`` (or ``rediss://``, ``unix://``), as redis-py takes it.
    prefix : str
        Put before every key (``[server] redis_prefix``).
    clock : callable, optional
        Seconds as a float sent to the scripts as "now" (tests); None: the Redis server's clock.
    """

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, clock: Callable[[], float] | None = None):
        import redis

        self.redis = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S,
                                          socket_connect_timeout=REDIS_TIMEOUT_S, health_check_interval=30)
        self.prefix, self.clock, self.url = prefix, clock, url
        self._scripts: dict[str, Any] = {}
        self._down_until = 0.0
        self._lock = threading.Lock()

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def run(self, script: str, keys: list[str], args: list[Any]) -> float | None:
        """The script's answer as a float, or None while Redis is unreachable (the caller then decides
        in process)."""
        if time.monotonic() < self._down_until:
            return None
        import redis

        try:
            runner = self._scripts.get(script)
            if runner is None:
                runner = self._scripts.setdefault(script, self.redis.register_script(script))
            now = "" if self.clock is None else repr(self.clock())
            return float(runner(keys=keys, args=[now, *args]))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            with self._lock:
                if time.monotonic() >= self._down_until:
                    log.error("Redis at %s is unreachable (%s): limits count in this process for %.0f s",
                              self.url, exc, RETRY_AFTER_S)
                self._down_until = time.monotonic() + RETRY_AFTER_S
            return None


def store_from_config(server: dict[str, Any], clock: Callable[[], float] | None) -> SharedStore | None:
    """The shared store of ``[server] redis_url`` (None when it is empty: limits stay in process)."""
    url = str(server.get("redis_url") or "").strip()
    if not url:
        return None
    return SharedStore(url, str(server.get("redis_prefix") or DEFAULT_PREFIX), clock)


# ---------------------------------------------------------------- the shared twins

class SharedEntryLimiter:
    """:class:`server.paradigms.entry.EntryLimiter` on counts in Redis (same ``admit``)."""

    def __init__(self, store: SharedStore, local):
        self.store, self.local = store, local
        self.limit, self.window = local.limit, local.window

    def admit(self, address: str, *, count: bool = True) -> float:
        if self.limit <= 0:
            return 0.0
        wait = self.store.run(_ENTRY, [self.store.key("entry", address)],
                              [self.limit, self.window, int(count), uuid.uuid4().hex])
        return self.local.admit(address, count=count) if wait is None else wait


class SharedAdmissionGate:
    """:class:`server.paradigms.entry.AdmissionGate` on one bucket in Redis: ``admission_rate`` is then
    the rate of the whole deployment, not of each process."""

    def __init__(self, store: SharedStore, local):
        self.store, self.local = store, local
        self.rate, self.burst = local.rate, local.burst

    def admit(self) -> float:
        if self.rate <= 0:
            return 0.0
        wait = self.store.run(_ADMISSION, [self.store.key("admission")], [self.rate, self.burst])
        return self.local.admit() if wait is None else wait


class SharedLoginThrottle:
    """:class:`server.login_throttle.LoginThrottle` on failure records in Redis (same methods)."""

    def __init__(self, store: SharedStore, local: LoginThrottle):
        self.store, self.local = store, local

    def _keys(self, username: str, client: str | None, device: str | None) -> list[str]:
        address = client_key(client)
        return [self.store.key("login", "account", username.lower()), self.store.key("login", "client", address),
                self.store.key("login", "usernames", address),
                self.store.key("login", "device", device) if device is not None else ""]

    def acquire(self, username: str, client: str | None, device: str | None = None) -> float:
        rules = [x for rule in (ACCOUNT, CLIENT, DEVICE) for x in (rule.free, rule.base, rule.cap)]
        wait = self.store.run(_LOGIN_ACQUIRE, self._keys(username, client, device),
                              [FORGET_AFTER, *rules, MAX_USERNAMES_PER_CLIENT, USERNAME_WINDOW, username.lower()])
        return self.local.acquire(username, client, device) if wait is None else wait

    def succeeded(self, username: str, client: str | None, device: str | None = None) -> None:
        if self.store.run(_LOGIN_SUCCEEDED, self._keys(username, client, device),
                          [FORGET_AFTER, username.lower()]) is None:
            self.local.succeeded(username, client, device)


# ---------------------------------------------------------------- per-assignment request rates

class RequestRate:
    """Requests per key (an assignment) at a sustained rate with a burst: the generic cell rate
    algorithm, one number per key (thread-safe, in memory; :class:`SharedRequestRate` in Redis).

    Parameters
    ----------
    per_minute : float
        Sustained requests per minute (0 = no limit).
    burst : float
        Requests taken at once after a quiet spell (at least 1).
    clock : callable, optional
        Seconds as a float (default :func:`time.monotonic`).
    """

    MAX_KEYS = 100_000

    def __init__(self, per_minute: float, burst: float, clock: Callable[[], float] | None = None):
        self.rate, self.burst = float(per_minute) / 60.0, max(1.0, float(burst))
        self.clock = clock or time.monotonic
        self._tat: dict[str, float] = {}
        self._lock = threading.Lock()

    def admit(self, key: str) -> float:
        """Count one request and return 0, or return the seconds until one more is taken (nothing counted)."""
        if self.rate <= 0:
            return 0.0
        now, interval = self.clock(), 1.0 / self.rate
        with self._lock:
            if len(self._tat) > self.MAX_KEYS:  # bound memory: keys whose bucket is full again say nothing
                self._tat = {k: t for k, t in self._tat.items() if t > now}
            tat = max(self._tat.get(key, now), now) + interval
            over = tat - now - self.burst * interval
            if over > 0:
                return over
            self._tat[key] = tat
            return 0.0


class SharedRequestRate:
    """:class:`RequestRate` on one key per assignment in Redis (same ``admit``)."""

    def __init__(self, store: SharedStore, local: RequestRate, name: str):
        self.store, self.local, self.name = store, local, name

    def admit(self, key: str) -> float:
        if self.local.rate <= 0:
            return 0.0
        wait = self.store.run(_RATE, [self.store.key("rate", self.name, key)], [self.local.rate, self.local.burst])
        return self.local.admit(key) if wait is None else wait
