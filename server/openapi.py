"""The worker API's OpenAPI document: the shared part (``server/openapi.yaml``: entry, state, actions,
environment, media, the shared components) and one operation per response kind that a paradigm
declares (:class:`server.paradigms.core.ResponseKind`), built from that declaration.

``GET /api/v1/openapi.yaml`` serves :func:`document_text`; the tests check every response against
:func:`document` and fuzz every operation in it, so a new response kind is documented, validated and
fuzzed as soon as its paradigm declares it.
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from .paradigms import all_paradigms
from .paradigms.core import ResponseKind, response_kinds

SHARED_PART = Path(__file__).resolve().parent / "openapi.yaml"
RESPONSES_PATH = "/assignments/{assignment_id}/"

_REF = "#/components/"


def _ref(section: str, name: str) -> dict[str, str]:
    return {"$ref": f"{_REF}{section}/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _kibibytes(size: int) -> str:
    return f"{size / 1024:g} KiB" if size % 1024 == 0 else f"{size} bytes"


def operation(kind: ResponseKind, tag: str) -> dict[str, Any]:
    """The OpenAPI operation of ``POST /assignments/{assignment_id}/<kind.name>``.

    The answers every response kind shares (400, 403, 404 no such assignment, 409 not at this stage or
    another paradigm's kind, 411, 413 with the kind's own ``max_body``) and the stored answer
    (``stored_status`` with ``response_schema``), then the kind's own ``operation`` fields over them.
    """
    responses: dict[str, Any] = {}
    if kind.response_schema is not None:
        responses[str(kind.stored_status)] = _json(kind.response_schema, "Stored.")
    responses.update({
        "400": _ref("responses", "InvalidRequest"),
        "403": _ref("responses", "BadToken"),
        "404": _ref("responses", "NotFound"),
        "409": _json(_ref("schemas", "ResponseRefusedError"),
                     "`wrong_stage`: not accepted at the assignment's stage, or the study's paradigm takes no "
                     f"`{kind.name}`; `assignment_ended`: the assignment has ended."),
        "411": _ref("responses", "LengthRequired"),
        "413": _json(_ref("schemas", "TooLargeError"),
                     f"The body exceeds {_kibibytes(kind.max_body)}; refused before it is read."),
    })
    extra = copy.deepcopy(dict(kind.operation))
    responses.update(extra.pop("responses", {}))
    return {"tags": [tag], "operationId": kind.operation_id, "summary": kind.summary, **extra,
            "parameters": [_ref("parameters", "AssignmentId")],
            "requestBody": {"required": True, "content": {"application/json": {"schema": kind.request_schema}}},
            "responses": dict(sorted(responses.items()))}


# The operations whose answer is the assignment's State: (path, method, status).
STATE_ANSWERS = (("/assignments/{assignment_id}/state", "get", "200"),
                 ("/assignments/{assignment_id}/actions", "post", "200"))


def build(shared: dict[str, Any], kinds: dict[str, tuple[Any, ResponseKind]],
          paradigms: list[Any] = ()) -> dict[str, Any]:
    """The document: ``shared`` with an operation and the named schemas of every kind in ``kinds``
    (``name -> (paradigm, kind)``, as :func:`server.paradigms.core.response_kinds` gives them), and the
    State answers (:data:`STATE_ANSWERS`) as one of the ``state_schema`` of every paradigm in ``paradigms``.

    Raises
    ------
    ValueError
        A kind's path or one of its named schemas is in the document already with other content.
    """
    spec = copy.deepcopy(shared)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    tags = spec.setdefault("tags", [])
    paths = spec.setdefault("paths", {})
    for name, (paradigm, kind) in kinds.items():
        path = RESPONSES_PATH + name
        if path in paths:
            raise ValueError(f"the response kind {name!r} clashes with the path {path} of server/openapi.yaml")
        for schema_name, schema in kind.schemas.items():
            if schemas.setdefault(schema_name, copy.deepcopy(schema)) != schema:
                raise ValueError(f"the response kind {name!r} declares the schema {schema_name!r}, "
                                 "which the document holds with other content")
        if not any(tag.get("name") == paradigm.kind for tag in tags):
            tags.append({"name": paradigm.kind, "description": f"Responses of {paradigm.title} studies."})
        paths[path] = {"post": operation(kind, paradigm.kind)}
    states = [_ref("schemas", p.state_schema) for p in paradigms if p.state_schema]
    for path, method, status in STATE_ANSWERS:
        if states and path in paths:
            answer = paths[path][method]["responses"][status]["content"]["application/json"]
            answer["schema"] = {"oneOf": states}
    return spec


@functools.cache
def document() -> dict[str, Any]:
    """The worker API's OpenAPI document (a dict; built once per process: treat it as read-only)."""
    return build(yaml.safe_load(SHARED_PART.read_text(encoding="utf-8")), response_kinds(), all_paradigms())


@functools.cache
def document_text() -> str:
    """:func:`document` as YAML text (what ``GET /api/v1/openapi.yaml`` serves)."""
    return yaml.safe_dump(document(), sort_keys=False, allow_unicode=True, width=110)


def load_part(path: Path) -> dict[str, Any]:
    """A paradigm's part of the document (its package's ``openapi.yaml``): ``schemas`` (named schemas for
    :attr:`ResponseKind.schemas`) and ``operations`` (per kind name, :attr:`ResponseKind.operation`)."""
    part = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {"schemas": part.get("schemas") or {}, "operations": part.get("operations") or {}}
