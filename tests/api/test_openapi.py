"""The OpenAPI document at /openapi.json describes every endpoint, and property-based fuzzing
of every operation from it (schemathesis) never gets a 5xx and always gets a documented status
with a body that matches the documented schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from rca.api.app import create_app
from tests.helpers.history import finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, WEBHOOK_TOKEN, RecordingDispatcher, make_settings


def test_openapi_lists_every_route_with_summary_security_and_errors(intake_client: TestClient) -> None:
    spec = intake_client.get("/openapi.json").json()
    assert intake_client.get("/docs").status_code == 200
    operations = {(method.upper(), path): op for path, item in spec["paths"].items() for method, op in item.items()}
    assert set(operations) == {
        ("POST", "/api/v1/alertmanager"),
        ("GET", "/api/v1/incidents"),
        ("GET", "/api/v1/incidents/{incident_id}"),
        ("GET", "/api/v1/incidents/{incident_id}/similar"),
        ("GET", "/api/v1/incidents/{incident_id}/evidence"),
        ("POST", "/api/v1/incidents/{incident_id}/feedback"),
        ("GET", "/api/v1/incidents/{incident_id}/feedback"),
        ("POST", "/api/v1/incidents/{incident_id}/investigations"),
        ("GET", "/api/v1/stats/accuracy"),
        ("GET", "/api/v1/scan/targets"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
    }
    for (method, path), op in operations.items():
        assert op.get("summary"), f"{method} {path} has no summary"
        if path.startswith(("/api/v1/incidents", "/api/v1/stats", "/api/v1/scan")):
            assert op.get("security") == [{"HTTPBearer": []}], f"{method} {path} does not declare its bearer token"
            assert {"401", "403"} <= set(op["responses"]), f"{method} {path} does not document 401/403"
        for code, response in op["responses"].items():
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            assert schema, f"{method} {path} documents {code} without a body schema"
            if code.startswith(("4", "5")) and path != "/readyz":  # its 503 is the readiness report (below)
                # One error shape per kind: 422s are field errors, every other error one message.
                expected = "ValidationErrorOut" if code == "422" else "ErrorOut"
                assert schema == {"$ref": f"#/components/schemas/{expected}"}, (method, path, code, schema)
        if op.get("parameters") or op.get("requestBody") or op.get("security"):
            assert "422" in op["responses"], f"{method} {path} can answer 422 but does not document it"
    schemes = spec["components"]["securitySchemes"]
    assert schemes["HTTPBearer"]["scheme"] == "bearer"
    # FastAPI's own 422 model would be a second shape; every operation declares ours instead.
    assert not {"HTTPValidationError", "ValidationError"} & set(spec["components"]["schemas"])
    errors = spec["components"]["schemas"]["ValidationErrorOut"]["properties"]["detail"]
    assert errors["minItems"] == 1 and errors["items"] == {"$ref": "#/components/schemas/FieldError"}
    assert set(spec["components"]["schemas"]["FieldError"]["required"]) == {"loc", "msg", "type"}


def test_openapi_declares_the_webhooks_bearer_and_basic_auth_and_readyz_503(intake_client: TestClient) -> None:
    spec = intake_client.get("/openapi.json").json()
    webhook = spec["paths"]["/api/v1/alertmanager"]["post"]
    # Alternatives: a bearer token, or basic auth with the token as the password (README).
    assert webhook["security"] == [{"WebhookBearer": []}, {"WebhookBasic": []}]
    schemes = spec["components"]["securitySchemes"]
    assert (schemes["WebhookBearer"]["type"], schemes["WebhookBearer"]["scheme"]) == ("http", "bearer")
    assert (schemes["WebhookBasic"]["type"], schemes["WebhookBasic"]["scheme"]) == ("http", "basic")
    assert "password" in schemes["WebhookBasic"]["description"]
    assert {"400", "401", "413", "422", "503"} <= set(webhook["responses"])
    readyz = spec["paths"]["/readyz"]["get"]["responses"]
    ready_schema = {"$ref": "#/components/schemas/ReadinessOut"}
    assert readyz["200"]["content"]["application/json"]["schema"] == ready_schema
    assert readyz["503"]["content"]["application/json"]["schema"] == ready_schema
    readiness = spec["components"]["schemas"]["ReadinessOut"]
    assert readiness["properties"]["status"]["enum"] == ["ready", "degraded", "not ready"]
    assert "prometheus" in readiness["properties"]["checks"]["description"]
    investigation = spec["components"]["schemas"]["InvestigationOut"]["properties"]
    assert "inconclusive" in investigation["status"]["description"]
    assert {"inconclusive_reason", "data_gap"} <= set(investigation)
    assert set(readiness["required"]) == {"status", "checks"}


FUZZ_EXAMPLES = 40  # per operation and backend


def fuzz(operation: Any, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate],
    )  # shrinking a failure took minutes; the report shows the case
    def call(case: Any) -> None:
        # Every check but "schema-valid data is accepted": JSON Schema cannot say "no NUL character
        # and no lone surrogate", which the database cannot store and we refuse with a documented 422.
        case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

    call()


def test_fuzzing_every_operation_finds_no_server_error(db_url: str, tmp_path: Path) -> None:
    """schemathesis generates requests (valid and invalid) for each operation of the document; every
    answer must be documented, match its schema and never be a 5xx. The app runs on each backend
    with a little history in it, so that ids and filters hit real rows."""
    app = create_app(make_settings(db_url, tmp_path), dispatcher=RecordingDispatcher())
    with TestClient(app) as client:  # runs the lifespan
        for n, cause in enumerate(["kv_memory_pressure", "arrival_surge", "kv_memory_pressure"], start=1):
            reply = post_webhook(client, make_payload(f"g{n}", alerts=[make_alert(f"fp-{n}", model_name="llama")]))
            finish_investigation(db_url, reply.json()["incident_id"], ["kv_cache_usage", "ttft_p95"], [cause])
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) == 12
        for operation in operations:
            headers = (
                {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
                if operation.path == "/api/v1/alertmanager"
                else dict(API_AUTH)
            )
            fuzz(operation, headers)
