"""API tokens: `rca token create` prints a token whose SHA-256 alone is stored; read tokens may
search but not send feedback; write tokens may do both; revoked tokens stop working; tokens from
RCA_API_TOKENS keep full access."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from rca.api.app import create_app
from rca.store.models import ApiTokenRow
from tests.helpers.databases import rows
from tests.helpers.paths import VENV_BIN
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import subprocess_env as env_for
from tests.helpers.service import RecordingDispatcher, make_settings


def rca_token(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = env_for(database_url=url, data_dir=str(tmp_path / "rca-data"))
    return subprocess.run(
        [str(VENV_BIN / "rca"), "token", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_token_create_stores_only_the_hash_and_scopes_gate_the_routes(db_url: str, tmp_path: Path) -> None:
    read = rca_token(db_url, tmp_path, "create", "--name", "grafana", "--scope", "read")
    write = rca_token(db_url, tmp_path, "create", "--name", "oncall-bot", "--scope", "write")
    assert read.returncode == 0 and write.returncode == 0, read.stderr + write.stderr
    read_token, write_token = read.stdout.strip(), write.stdout.strip()
    assert read_token.startswith("rca_") and len(read_token) > 40 and read_token != write_token
    stored = rows(db_url, select(ApiTokenRow.name, ApiTokenRow.token_hash, ApiTokenRow.scopes).order_by(ApiTokenRow.id))
    assert [(r.name, r.scopes) for r in stored] == [("grafana", ["read"]), ("oncall-bot", ["read", "write"])]
    assert stored[0].token_hash == hashlib.sha256(read_token.encode()).hexdigest()
    assert all(read_token not in str(tuple(r)) and write_token not in str(tuple(r)) for r in stored)

    with TestClient(create_app(make_settings(db_url, tmp_path), dispatcher=RecordingDispatcher())) as client:
        incident = post_webhook(client, make_payload("g", alerts=[make_alert("fp")])).json()["incident_id"]
        as_read = {"Authorization": f"Bearer {read_token}"}
        as_write = {"Authorization": f"Bearer {write_token}"}
        body = {"category": "arrival_surge"}
        assert client.get("/api/v1/incidents", headers=as_read).status_code == 200
        assert client.get("/api/v1/stats/accuracy", headers=as_read).status_code == 200
        refused = client.post(f"/api/v1/incidents/{incident}/feedback", json=body, headers=as_read)
        assert refused.status_code == 403 and "lacks the 'write' scope" in refused.json()["detail"]
        accepted = client.post(f"/api/v1/incidents/{incident}/feedback", json=body, headers=as_write)
        assert accepted.status_code == 201 and accepted.json()["author"] == "oncall-bot"

        revoked = rca_token(db_url, tmp_path, "revoke", "--name", "grafana")
        assert revoked.returncode == 0, revoked.stderr
        assert client.get("/api/v1/incidents", headers=as_read).status_code == 401
        assert client.get("/api/v1/incidents", headers=as_write).status_code == 200


def test_environment_tokens_keep_full_access_and_are_named_by_position(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, api_tokens="first-token,second-token")
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        incident = post_webhook(client, make_payload("g", alerts=[make_alert("fp")])).json()["incident_id"]
        reply = client.post(
            f"/api/v1/incidents/{incident}/feedback",
            json={"category": "arrival_surge"},
            headers={"Authorization": "Bearer second-token"},
        )
        assert reply.status_code == 201 and reply.json()["author"] == "env-token-2"


def test_token_cli_refuses_duplicates_and_unknown_names(db_url: str, tmp_path: Path) -> None:
    assert rca_token(db_url, tmp_path, "create", "--name", "ci").returncode == 0
    again = rca_token(db_url, tmp_path, "create", "--name", "ci")
    assert again.returncode == 2 and "already exists" in again.stderr and again.stdout == ""
    missing = rca_token(db_url, tmp_path, "revoke", "--name", "nobody")
    assert missing.returncode == 2 and "no live token named 'nobody'" in missing.stderr
    bad_scope = rca_token(db_url, tmp_path, "create", "--name", "x", "--scope", "admin")
    assert bad_scope.returncode == 2 and "invalid choice" in bad_scope.stderr
    assert len(rows(db_url, select(ApiTokenRow.id))) == 1
