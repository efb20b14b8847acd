"""Failed-login throttling that slows password guessing without letting a stranger lock anyone out.

Every login attempt is first counted as a failure (so a burst of parallel guesses cannot all
slip past the check while the password hashes are computed), then refunded if the password
was right. Failures are counted under three keys:

account (the username, case-insensitive)
    Failures from browsers without a device cookie for that account. After :data:`ACCOUNT`
    ``.free`` failures each further attempt must wait a delay that doubles with every failure
    (1 s, 2 s, 4 s ... up to 15 minutes). This is a delay, not a lock: the right password
    still works once the delay has passed.
client (the client's address; IPv6 addresses by their /64 network)
    Failures from one address across all usernames, with their own growing delay
    (:data:`CLIENT`), and at most :data:`MAX_USERNAMES_PER_CLIENT` distinct usernames
    failed within :data:`USERNAME_WINDOW` (password spraying): a further *new* username is
    refused until the oldest one ages out.
device (a device cookie)
    A successful login sets a signed, long-lived "device cookie" in that browser (OWASP's
    "device cookies" scheme, see server/auth.py). An attempt carrying a valid device cookie for
    the username being tried skips the account and client rules and is delayed only by that
    device's own failures (:data:`DEVICE`). So an attacker hammering an account, even from the
    experimenter's own network, cannot keep the experimenter out of a browser they logged in
    from before; a new browser of the experimenter waits like anyone else (or an administrator
    runs ``perceptlab user passwd``).

A refused attempt gets 429 with ``Retry-After`` and a message on the login page; no request
thread ever sleeps. A key is forgotten :data:`FORGET_AFTER` after its last failure; a success
resets the account (without device cookie) or the device (with one) and refunds the client's
count for that attempt.

The counters live in process memory (one :class:`LoginThrottle` per app, thread-safe).
With several server processes (gunicorn workers) or instances, each keeps its own counters:
an attacker whose requests are spread over N processes gets up to N times the attempts
before each delay, and a restart forgets everything. With ``[server] redis_url`` the same
rules run on counters in Redis shared by every process and kept across restarts
(:class:`server.limits.SharedLoginThrottle`). The number of tracked keys in process is
bounded (:data:`MAX_KEYS`); beyond it the longest-quiet keys are dropped first.

The clock is injectable (``LoginThrottle(clock=...)``, seconds as floats, monotonic) so tests
step through delays without sleeping.
"""
from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rule:
    """Growing delays for one kind of key: ``free`` failures cost nothing, then each waits
    ``base * 2 ** (failures - free)`` seconds, at most ``cap``."""

    free: int
    base: float
    cap: float

    def delay(self, failures: int) -> float:
        if failures < self.free:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(failures - self.free, 64))


ACCOUNT = Rule(free=5, base=1.0, cap=15 * 60.0)
CLIENT = Rule(free=10, base=1.0, cap=60 * 60.0)
DEVICE = Rule(free=5, base=1.0, cap=15 * 60.0)
MAX_USERNAMES_PER_CLIENT = 5
USERNAME_WINDOW = 60 * 60.0       # seconds a failed username counts against its client
FORGET_AFTER = 24 * 60 * 60.0     # seconds after its last failure a key starts afresh
MAX_KEYS = 10_000


@dataclass
class _Record:
    failures: int = 0
    last: float | None = None  # time of the last failure
    usernames: dict[str, float] = field(default_factory=dict)  # client records: username -> last failure


def client_key(address: str | None) -> str:
    """The throttle key of a client address: IPv4 as is, IPv6 by its /64 (one subscriber's network)."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class LoginThrottle:
    """Per-account, per-client and per-device login throttling (see the module docstring).

    Parameters
    ----------
    clock : callable, optional
        Returns the current time in seconds (default ``time.monotonic``); tests pass a fake.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], _Record] = {}

    # ------------------------------------------------------------ public

    def acquire(self, username: str, client: str | None, device: str | None = None) -> float:
        """Ask to try a password: 0.0 means go (the attempt is counted as a failure until
        :meth:`succeeded` refunds it); a positive number is the seconds to wait (nothing counted).

        Parameters
        ----------
        username : str
            As typed (compared case-insensitively).
        client : str or None
            The client's address (``request.remote_addr``).
        device : str or None
            The ID of a valid device cookie *for this username*, else None.
        """
        now = self.clock()
        account, address = username.lower(), client_key(client)
        with self._lock:
            self._bound(now)
            if device is not None:
                wait = self._wait(("device", device), DEVICE, now)
                if wait <= 0:
                    self._count(("device", device), now)
                return wait
            client_record = self._record(("client", address), now)
            wait = max(self._wait(("account", account), ACCOUNT, now), self._wait(("client", address), CLIENT, now),
                       self._spray_wait(client_record, account, now))
            if wait <= 0:
                self._count(("account", account), now)
                self._count(("client", address), now).usernames[account] = now
            return wait

    def succeeded(self, username: str, client: str | None, device: str | None = None) -> None:
        """The attempt let in by :meth:`acquire` had the right password: refund it."""
        account, address = username.lower(), client_key(client)
        with self._lock:
            if device is not None:
                self._records.pop(("device", device), None)
                return
            self._records.pop(("account", account), None)
            record = self._records.get(("client", address))
            if record is not None:
                record.failures = max(0, record.failures - 1)
                record.usernames.pop(account, None)

    # ------------------------------------------------------------ internals

    def _record(self, key: tuple[str, str], now: float) -> _Record:
        record = self._records.get(key)
        if record is None or (record.last is not None and now - record.last >= FORGET_AFTER):
            record = self._records[key] = _Record()
        return record

    def _wait(self, key: tuple[str, str], rule: Rule, now: float) -> float:
        record = self._record(key, now)
        if not record.failures or record.last is None:
            return 0.0
        return max(0.0, record.last + rule.delay(record.failures) - now)

    def _count(self, key: tuple[str, str], now: float) -> _Record:
        record = self._record(key, now)
        record.failures += 1
        record.last = now
        return record

    @staticmethod
    def _spray_wait(record: _Record, account: str, now: float) -> float:
        """Seconds until this client may try one more *new* username."""
        for name, at in list(record.usernames.items()):
            if now - at >= USERNAME_WINDOW:
                del record.usernames[name]
        if account in record.usernames or len(record.usernames) < MAX_USERNAMES_PER_CLIENT:
            return 0.0
        return min(record.usernames.values()) + USERNAME_WINDOW - now

    def _bound(self, now: float) -> None:
        """Keep at most MAX_KEYS records: forget stale ones, then the longest-quiet ones."""
        if len(self._records) < MAX_KEYS:
            return
        self._records = {k: r for k, r in self._records.items()
                         if r.last is not None and now - r.last < FORGET_AFTER}
        if len(self._records) >= MAX_KEYS:
            newest = sorted(self._records.items(), key=lambda item: item[1].last)[-(MAX_KEYS // 2):]
            self._records = dict(newest)
