"""Checks of answers against what the OpenAPI document declares for them, 422s above all (one shape)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.testclient import TestClient
from jsonschema_rs import Draft202012Validator  # schemathesis' validator

DECLARED_422 = "#/components/schemas/ValidationErrorOut"


def assert_matches(spec: dict[str, Any], schema: dict[str, Any], body: Any) -> None:
    # A root holding the document's components, so that "#/components/..." references resolve in it.
    validator = Draft202012Validator({**schema, "components": spec["components"]})
    problems = [f"/{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(body)]
    assert not problems, f"body does not match {schema}: {problems}; body: {body}"


def assert_documented(client: TestClient, reply: httpx.Response, method: str, path: str) -> None:
    """The answer's status is documented for the operation, and its body matches that status's schema."""
    spec = client.get("/openapi.json").json()
    responses = spec["paths"][path][method.lower()]["responses"]
    assert str(reply.status_code) in responses, f"{method} {path} does not document {reply.status_code}"
    assert_matches(spec, responses[str(reply.status_code)]["content"]["application/json"]["schema"], reply.json())


def field_errors(client: TestClient, reply: httpx.Response) -> list[dict[str, Any]]:
    """A 422's field errors, once its body validated against the schema that /openapi.json declares."""
    assert reply.status_code == 422, reply.text
    assert_matches(client.get("/openapi.json").json(), {"$ref": DECLARED_422}, reply.json())
    return reply.json()["detail"]


def only_error(
    client: TestClient, reply: httpx.Response, loc: list[str | int], type_: str | None = None, fragment: str = ""
) -> dict[str, Any]:
    """The single field error of a 422, at `loc`, of `type_`, whose message holds `fragment`."""
    [error] = field_errors(client, reply)
    assert error["loc"] == loc, error
    assert type_ is None or error["type"] == type_, error
    assert fragment in error["msg"], error
    return error
