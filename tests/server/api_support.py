"""The worker API's OpenAPI checks shared by the server tests: :class:`SpecClient` checks every response
(and accepted/refused JSON requests) against the document of :mod:`server.openapi` (``server/openapi.yaml``
and the paradigms' response kinds); database snapshots and error checks.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from jsonschema import Draft202012Validator, validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import select

from server.models import Base
from server.openapi import document
from server.services import app_services

SPEC: dict = document()

SPEC_URI = "urn:perceptlab:openapi"

REGISTRY = Registry().with_resource(SPEC_URI, Resource.from_contents(SPEC, default_specification=DRAFT202012))

API_PREFIX = "/api/v1"

METHODS = ("get", "post", "put", "patch", "delete")


def _pointer(*segments: str) -> str:
    return "".join("/" + quote(s.replace("~", "~0").replace("/", "~1"), safe="~") for s in segments)


# (base URI, $ref, the instance as canonical JSON) of every instance a $ref's schema found valid.
_VALID_BY_REF: set[tuple[str | None, str, str]] = set()


def _ref_remembering_valid_instances(validator, ref: str, instance: Any, schema: dict):
    """jsonschema's ``$ref`` keyword, skipped for an instance the same schema already found valid.

    Validation is a pure function of the schema and the instance's JSON value, and the API tests send the
    same parts of a state again and again (a page's trials in the answer to each of its votes, each state
    kind tried against every ``oneOf`` branch): validation took about a tenth of the CPU of the allocation
    tests (1.5 of 15 s in a gold recurrence test), a fifth less with this. Only valid results are kept, so an
    invalid instance is validated, and its errors reported, as before.
    """
    try:
        key = (validator._resolver._base_uri, ref, json.dumps(instance, sort_keys=True, allow_nan=False))
    except (TypeError, ValueError):  # not plain JSON (NaN, bytes): validated as always
        key = None
    if key is not None and key in _VALID_BY_REF:
        return
    errors = list(validator._validate_reference(ref=ref, instance=instance))
    if key is not None and not errors:
        _VALID_BY_REF.add(key)
    yield from errors


_Validator = validators.extend(Draft202012Validator, {"$ref": _ref_remembering_valid_instances})


@functools.lru_cache(maxsize=None)
def _validator(pointer: str) -> Draft202012Validator:
    return _Validator({"$ref": f"{SPEC_URI}#{pointer}"}, registry=REGISTRY,
                      format_checker=Draft202012Validator.FORMAT_CHECKER)


def _deref(node: dict, pointer: str) -> tuple[dict, str]:
    """Follow a local ``$ref`` of a response/parameter object: ``(object, its pointer)``."""
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        pointer = ref[1:]
        node = SPEC
        for segment in pointer[1:].split("/"):
            node = node[segment.replace("~1", "/").replace("~0", "~")]
    return node, pointer


def find_operation(method: str, url: str) -> tuple[str, dict] | None:
    """``(path template, operation)`` of the spec for a request URL, or None when the spec has no such route."""
    path = urlsplit(url).path
    if not path.startswith(API_PREFIX):
        return None
    path = path[len(API_PREFIX):]
    for template, item in SPEC["paths"].items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    return None


def response_errors(method: str, url: str, status: int, mimetype: str, body: Any) -> list[str]:
    """Why a response does not match the spec (empty when it does)."""
    found = find_operation(method, url)
    if found is None:  # unknown route or method: the generic JSON error
        if mimetype != "application/json":
            return [f"{method} {url}: {status} answered {mimetype}, not JSON"]
        return [e.message for e in _validator(_pointer("components", "schemas", "Error")).iter_errors(body)]
    template, operation = found
    responses = operation["responses"]
    if str(status) not in responses:
        return [f"{method.upper()} {template}: status {status} is not documented (documented: {sorted(responses)})"]
    response, pointer = _deref(responses[str(status)],
                               _pointer("paths", template, method.lower(), "responses", str(status)))
    content = response.get("content")
    if not content:
        return [] if body in (None, b"", "") else [f"{status} should have no body, got {body!r}"]
    if mimetype not in content:
        return [f"{method.upper()} {template} {status}: content type {mimetype}, documented {sorted(content)}"]
    if mimetype != "application/json":
        return []
    pointer = pointer + _pointer("content", mimetype, "schema")
    return [f"{'/'.join(map(str, e.absolute_path)) or '<body>'}: {e.message}"
            for e in _validator(pointer).iter_errors(body)]


def request_errors(method: str, url: str, body: Any) -> list[str]:
    """Why a JSON request body is invalid for the spec (empty when it is valid)."""
    found = find_operation(method, url)
    assert found is not None, f"{method} {url} is not in the spec"
    template, operation = found
    assert "requestBody" in operation, f"{method} {template} takes no body"
    pointer = _pointer("paths", template, method.lower(), "requestBody", "content", "application/json", "schema")
    return [e.message for e in _validator(pointer).iter_errors(body)]


class SpecClient:
    """The Flask test client, checking every response (and accepted/refused JSON requests) against the spec."""

    def __init__(self, client):
        self.client = client

    def open(self, method: str, url: str, **kwargs):
        response = self.client.open(url, method=method.upper(), **kwargs)
        body = response.get_json(silent=True) if response.mimetype == "application/json" else response.data
        if response.mimetype == "application/json" and body is None:
            pytest.fail(f"{method} {url}: {response.status_code} body is not JSON: {response.data[:200]!r}")
        problems = response_errors(method, url, response.status_code, response.mimetype, body)
        assert not problems, f"{method} {url} -> {response.status_code} {body!r}: " + "; ".join(problems)
        if "json" in kwargs and find_operation(method, url) is not None:
            spec_says = request_errors(method, url, kwargs["json"])
            if response.status_code < 300:
                assert not spec_says, (f"the server accepted {method} {url} {kwargs['json']!r} "
                                       f"({response.status_code}), the spec rejects it: {spec_says}")
            elif response.status_code == 400:
                assert spec_says, (f"the server refused {method} {url} {kwargs['json']!r} with 400 "
                                   f"{body!r}, the spec accepts it")
        return response

    def get(self, url: str, **kwargs):
        return self.open("get", url, **kwargs)

    def post(self, url: str, **kwargs):
        return self.open("post", url, **kwargs)


def db_snapshot(app) -> dict[str, list[tuple]]:
    """Every row of every table, ordered by primary key: equal snapshots = nothing changed."""
    with app_services(app).sessions() as session:
        snapshot = {}
        for table in Base.metadata.sorted_tables:
            rows = session.execute(select(table).order_by(*table.primary_key.columns)).all()
            snapshot[table.name] = [tuple(row) for row in rows]
        return snapshot


def expect_error(response, status: int, code: str, mentions: str | tuple[str, ...] | None = None) -> None:
    """``response`` is the error ``code``; its message names ``mentions`` (one of them, for a tuple)."""
    assert response.status_code == status, (response.status_code, response.get_json(silent=True))
    body = response.get_json()
    assert body["error"] == code, body
    assert body["message"].strip()
    if mentions is not None:
        words = (mentions,) if isinstance(mentions, str) else mentions
        assert any(w.lower() in body["message"].lower() for w in words), f"the message should name {words}: {body}"
