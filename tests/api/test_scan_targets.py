"""`GET /api/v1/scan/targets`: the fleet scan's targets as the scan stored them, each with its
state, its early-warning incident and the TTFT SLO it is judged against with where that came
from; authenticated like every /api/v1 route, its answers as documented."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient

from rca.scan.fleet import ServingInstance
from rca.scan.forecast import Limit, SignalForecast
from rca.scan.slo_rules import Slo
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition
from rca.scan.warnings import Actions, keep_slos, load_slos, record
from rca.store.db import session_scope
from tests.helpers.errors import assert_documented, only_error
from tests.helpers.service import API_AUTH

PATH = "/api/v1/scan/targets"
RULE = "rule LLMTTFTSLOBreach (group llm-serving, rules.yml)"


def serving(name: str) -> ServingInstance:
    return ServingInstance(f"{name}:8000", name, name, "vllm", "vllm_v1")


def test_the_scans_targets_are_listed_with_their_state_incident_and_slo(intake_client: TestClient, db_url: str) -> None:
    assert intake_client.get(PATH).status_code == 401
    empty = intake_client.get(PATH, headers=API_AUTH)
    assert empty.status_code == 200 and empty.json() == {"items": []}

    now = datetime.now(UTC).timestamp()
    ttft = Limit("ttft_p95", "TTFT p95 against its SLO", "seconds", ">", 1.0, latest=True, slo_source=RULE)
    assessment = Assessment(at=now, signals=[SignalForecast(ttft, "test", 1.4, 0.6, 0.1, None, True, True, now - 60)])
    warned = Transition(ScanState.OK, ScanState.WARNING, now, "TTFT p95 1.40 s beyond its SLO (1 s)", {})
    with session_scope(db_url) as session:
        # A target that never left ok gets its row with its SLO; one that warns, with its incident.
        keep_slos(session, [(serving("gpu-b"), Slo(2.0, "default"))], {}, now - 300)
        memory = record(
            session, serving("gpu-a"), warned, TargetMemory(), assessment, Policy(), owe_slack=False, actions=Actions()
        )
        keep_slos(session, [(serving("gpu-a"), Slo(1.0, RULE))], {"gpu-a:8000": memory}, now)
    with session_scope(db_url) as session:
        assert load_slos(session) == {"gpu-a:8000": Slo(1.0, RULE), "gpu-b:8000": Slo(2.0, "default")}

    listed = intake_client.get(PATH, headers=API_AUTH)
    assert listed.status_code == 200, listed.text
    assert_documented(intake_client, listed, "GET", PATH)
    items = listed.json()["items"]
    assert [(i["instance"], i["host"], i["state"], i["slo_ttft_seconds"], i["slo_source"]) for i in items] == [
        ("gpu-a:8000", "gpu-a", "warning", 1.0, RULE),
        ("gpu-b:8000", "gpu-b", "ok", 2.0, "default"),
    ]
    assert items[0]["incident_id"] == memory.incident_id and items[1]["incident_id"] is None
    assert datetime.fromisoformat(items[1]["since"]).timestamp() == round(now - 300, 6)

    warning = intake_client.get(PATH, params={"state": "warning"}, headers=API_AUTH).json()["items"]
    assert [item["instance"] for item in warning] == ["gpu-a:8000"]
    refused = intake_client.get(PATH, params={"state": "burning"}, headers=API_AUTH)
    only_error(intake_client, refused, ["query", "state"])
    assert_documented(intake_client, refused, "GET", PATH)
