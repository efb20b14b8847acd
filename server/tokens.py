"""Signed worker tokens: the only credential a worker's browser holds.

A token names one assignment and carries that assignment's random nonce and its
study's ID, signed with the server's secret key (itsdangerous, HMAC-SHA1 over a
URL-safe payload). The study ID lets the vote path find the study's rules before
it touches the database (tokens made before it was added have none: their
requests take the regular path).
It does not expire (a worker may resume a HIT hours later), but it is useless
for any other assignment, and replacing the nonce revokes it.

Every API request of a worker carries the same token, so a verified token is
remembered (per secret key, in a bounded LRU cache): verifying is a pure function
of key and token, and the nonce is still compared with the database on every
request, so revocation is immediate. Forged tokens are never cached.
"""
from __future__ import annotations

import secrets
from functools import lru_cache
from typing import NamedTuple

from itsdangerous import BadSignature, URLSafeSerializer

SALT = "perceptlab.assignment"
# A real token is ~60 characters (an integer ID and 16 hex digits, signed); anything far longer is
# refused before any work, and the cache below never holds large strings.
MAX_TOKEN_LENGTH = 512
VERIFIED_CACHE_SIZE = 8192  # tokens of this many recently active assignments skip the HMAC


class TokenClaims(NamedTuple):
    """What a verified token says."""

    assignment_id: int
    nonce: str
    study_id: int | None  # None in tokens made before the study was named in them


class BadToken(Exception):
    """The token is malformed, forged, or does not belong to the assignment."""


def new_nonce() -> str:
    return secrets.token_hex(8)


@lru_cache(maxsize=16)
def _serializer(secret_key: str) -> URLSafeSerializer:
    # Building a serializer is not free (itsdangerous probes its JSON module on every construction).
    return URLSafeSerializer(secret_key, salt=SALT)


def make_token(secret_key: str, assignment_id: int, nonce: str, study_id: int | None = None) -> str:
    """The signed token of an assignment: ``[assignment_id, nonce, study_id]`` (``[assignment_id, nonce]``
    without a study), signed with ``secret_key``."""
    return _serializer(secret_key).dumps([assignment_id, nonce] if study_id is None
                                         else [assignment_id, nonce, study_id])


def assignment_token(secret_key: str, assignment) -> str:
    """The token the server hands out for an assignment (anything with ``id``, ``token_nonce``,
    ``study_id`` and ``pilot``): it names the study, so that the worker's votes can take the
    one-statement path, except for a pilot's assignment, whose votes take the regular path (which
    counts them in no pair's target: server/pilot.py)."""
    return make_token(secret_key, assignment.id, assignment.token_nonce,
                      None if getattr(assignment, "pilot", False) else assignment.study_id)


def read_token(secret_key: str, token: str) -> TokenClaims:
    """Return the token's :class:`TokenClaims`; raise :class:`BadToken` when the signature does not verify.

    The caller must still compare the nonce with the assignment's (a replaced nonce revokes the token).
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise BadToken("the worker token is invalid")
    return _verified(secret_key, token)


@lru_cache(maxsize=VERIFIED_CACHE_SIZE)
def _verified(secret_key: str, token: str) -> TokenClaims:
    # lru_cache keeps only results: a token that raises BadToken is verified again each time it comes.
    try:
        value = _serializer(secret_key).loads(token)
    except BadSignature:
        raise BadToken("the worker token is invalid") from None
    if (not isinstance(value, list) or len(value) not in (2, 3) or not _is_id(value[0])
            or not isinstance(value[1], str) or (len(value) == 3 and not _is_id(value[2]))):
        raise BadToken("the worker token is invalid")
    return TokenClaims(value[0], value[1], value[2] if len(value) == 3 else None)


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
