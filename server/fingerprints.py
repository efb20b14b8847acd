"""Entry fingerprints: which workers of a study came from the same network or the same browser build,
without keeping either.

Sock puppets (one person behind many one-page identities, issue 38) tend to share a network and a browser.
At a worker's first entry the server stores two keyed hashes, never the raw values::

    address_group = HMAC-SHA256(secret key, "perceptlab/entry-address/" + slug + NUL + prefix).hex()[:16]
    agent_group   = HMAC-SHA256(secret key, "perceptlab/entry-agent/" + slug + NUL + User-Agent).hex()[:16]

``prefix`` is the client address's network: its /24 for IPv4, its /48 for IPv6 (an IPv4-mapped IPv6
address counts as IPv4), so the neighbours a household, a lab or a VPN exit hands out share it. Equal
values mean equal inputs within one study; nobody without the server's secret key can test a guessed
address or browser against them, and the slug in the message makes two studies' values unlinkable.
An address that is not an IP address, or a missing User-Agent, gets an empty group (it matches nothing).

Only the analysis uses them, as evidence beside the votes (analysis/sockpuppets.py, through workers.csv's
``address_group`` and ``agent_group``): a shared network is common among honest people (a campus, a
mobile carrier's NAT), so a fingerprint never refuses an entry by itself.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import NamedTuple

GROUP_HEX = 16  # 64 bits: collisions among a study's workers are negligible
IPV4_PREFIX, IPV6_PREFIX = 24, 48


class EntryFingerprint(NamedTuple):
    """The two keyed hashes stored with a worker (empty: unknown)."""

    address_group: str
    agent_group: str


def address_prefix(address: str | None) -> str:
    """The network of a client address: ``a.b.c.0/24`` for IPv4, ``x:x:x::/48`` for IPv6; ``""`` when
    ``address`` is not an IP address."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return ""
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    bits = IPV4_PREFIX if ip.version == 4 else IPV6_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))


def keyed_group(secret_key: str, purpose: str, slug: str, value: str) -> str:
    """``GROUP_HEX`` hex digits of HMAC-SHA256(secret key, "perceptlab/entry-<purpose>/" + slug + NUL +
    value), or ``""`` for an empty value."""
    if not value:
        return ""
    message = f"perceptlab/entry-{purpose}/{slug}\0{value}".encode("utf-8", "surrogatepass")
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()[:GROUP_HEX]


def entry_fingerprint(secret_key: str, slug: str, address: str | None, user_agent: str | None) -> EntryFingerprint:
    """The fingerprint of an entry into study ``slug`` from ``address`` with ``user_agent``."""
    return EntryFingerprint(keyed_group(secret_key, "address", slug, address_prefix(address)),
                            keyed_group(secret_key, "agent", slug, (user_agent or "").strip()))
