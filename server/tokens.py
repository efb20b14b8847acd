"""Signed worker tokens: the only credential a worker's browser holds.

A token names one assignment and carries that assignment's random nonce, signed
with the server's secret key (itsdangerous, HMAC-SHA1 over a URL-safe payload).
It does not expire (a worker may resume a HIT hours later), but it is useless
for any other assignment, and replacing the nonce revokes it.
"""
from __future__ import annotations

import secrets

from itsdangerous import BadSignature, URLSafeSerializer

SALT = "perceptlab.assignment"


class BadToken(Exception):
    """The token is malformed, forged, or does not belong to the assignment."""


def new_nonce() -> str:
    return secrets.token_hex(8)


def make_token(secret_key: str, assignment_id: int, nonce: str) -> str:
    return URLSafeSerializer(secret_key, salt=SALT).dumps([assignment_id, nonce])


def read_token(secret_key: str, token: str) -> tuple[int, str]:
    """Return ``(assignment_id, nonce)``; raise :class:`BadToken` when the signature does not verify."""
    try:
        value = URLSafeSerializer(secret_key, salt=SALT).loads(token)
    except BadSignature:
        raise BadToken("the worker token is invalid") from None
    if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], int)
            or not isinstance(value[1], str)):
        raise BadToken("the worker token is invalid")
    return value[0], value[1]
