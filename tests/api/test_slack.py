"""`POST /slack/interactivity` (issue 32 item 3): the incident message's buttons, clicked in Slack.

Requests are signed as Slack signs them (HMAC-SHA256 of `v0:<timestamp>:<body>` with the signing
secret, computed here by hand, not by the verifier under test), over the form body Slack sends
(`payload=<block_actions JSON>`). The clicks take the values of the message the fake Slack really
received; feedback lands in the real PostgreSQL; the message is brought up to date by the real
delivery (chat.update of the stored message, checked request by request on the fake Slack)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import select

from rca.api.app import create_app
from rca.config import Settings
from rca.domain.status import SlackEvent
from rca.notify.service import deliver
from rca.store.models import FeedbackRow, InvestigationRow
from tests.fakes.slack import FakeSlack
from tests.helpers.databases import rows
from tests.helpers.service import RecordingDispatcher
from tests.helpers.slack import slack_owed, slack_settings, store_incident, store_investigation
from tests.helpers.waiting import wait_for

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ALICE = {"id": "U0TEST1", "username": "alice", "name": "alice", "team_id": "T0000TEST"}
AUTHOR = "slack:alice (U0TEST1)"
TOP, SECOND = "kv_memory_pressure", "arrival_surge"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake
    assert fake.problems == [], "a payload broke Block Kit's limits"


@pytest.fixture
def settings(pg_db: str, tmp_path: Path, slack: FakeSlack) -> Settings:
    return slack_settings(pg_db, tmp_path, slack, slack_signing_secret=SECRET)


@pytest.fixture
def client(settings: Settings, recorder: RecordingDispatcher) -> Iterator[TestClient]:
    with TestClient(create_app(settings, recorder)) as client:
        yield client


def posted_incident(settings: Settings, slack: FakeSlack) -> tuple[int, int]:
    """An incident with a finished investigation (TOP first, SECOND next), posted to the fake Slack."""
    incident_id = store_incident(settings.effective_database_url)
    investigation_id = store_investigation(
        settings.effective_database_url, incident_id, ["queue_median"], [TOP, SECOND]
    )
    assert deliver(settings, incident_id, SlackEvent.INVESTIGATION).status == "delivered"
    return incident_id, investigation_id


def buttons(slack: FakeSlack) -> dict[str, dict[str, Any]]:
    """The interactive elements of the message Slack received, by action_id."""
    [post] = slack.posts()
    [block] = [b for b in post.payload["blocks"] if b.get("block_id") == "rca_actions"]
    return {element["action_id"]: element for element in block["elements"]}


def signed(body: str, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    timestamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def payload(slack: FakeSlack, action: dict[str, Any], user: dict[str, Any] = ALICE) -> dict[str, Any]:
    """A block_actions payload as Slack sends it for a click on the incident's message."""
    return {
        "type": "block_actions",
        "user": user,
        "api_app_id": "A0TEST",
        "token": "deprecated-verification-token",
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": "C0TEST", "is_ephemeral": False},
        "trigger_id": "123.456.abc",
        "team": {"id": "T0000TEST", "domain": "example"},
        "channel": {"id": "C0TEST", "name": "llm-alerts"},
        "response_url": slack.response_url,
        "actions": [action],
    }


def click(client: TestClient, data: dict[str, Any], **sign: Any) -> Any:
    body = urlencode({"payload": json.dumps(data)})
    return client.post("/slack/interactivity", content=body, headers=signed(body, **sign))


def pressed(element: dict[str, Any]) -> dict[str, Any]:
    return {"action_id": element["action_id"], "block_id": "rca_actions", "type": "button", "value": element["value"]}


def chosen(element: dict[str, Any], cause: str) -> dict[str, Any]:
    [option] = [o for o in element["options"] if o["text"]["text"] == cause]
    return {
        "action_id": element["action_id"],
        "block_id": "rca_actions",
        "type": "static_select",
        "selected_option": option,
    }


def clicks(outcome: str) -> float:
    """`rca_slack_actions_total` of this outcome, in this process."""
    return REGISTRY.get_sample_value("rca_slack_actions_total", {"outcome": outcome}) or 0.0


def feedback_rows(url: str) -> list[Any]:
    return rows(url, select(FeedbackRow.__table__).order_by(FeedbackRow.id))


# --------------------------------------------------------------------------- the message's buttons


def test_a_bot_message_carries_the_buttons_naming_what_it_showed(settings: Settings, slack: FakeSlack) -> None:
    incident_id, investigation_id = posted_incident(settings, slack)
    found = buttons(slack)
    assert list(found) == ["rca_confirm", "rca_pick", "rca_investigate_again"]
    confirm, pick, again = found.values()
    assert confirm["text"]["text"] == f"Confirm {TOP}" and confirm["style"] == "primary"
    assert json.loads(confirm["value"]) == {"incident": incident_id, "investigation": investigation_id, "cause": TOP}
    assert pick["type"] == "static_select" and pick["placeholder"]["text"] == "Pick another cause"
    causes = [o["text"]["text"] for o in pick["options"]]
    assert causes[:3] == ["cpu_launch_overhead", "cpu_affinity_numa", "cpu_quota_throttling"] and len(causes) == 13
    assert json.loads(pick["options"][5]["value"]) == {
        "incident": incident_id,
        "investigation": investigation_id,
        "cause": "kv_memory_pressure",
    }
    assert json.loads(again["value"]) == {"incident": incident_id, "investigation": investigation_id}
    [post] = slack.posts()
    links = [e for b in post.payload["blocks"] if b["type"] == "actions" for e in b["elements"] if "url" in e]
    assert links[0]["url"] == f"https://rca.example/incidents/{incident_id}", "the page's link stays"


def test_a_webhook_message_has_no_action_buttons_only_its_links(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(pg_db, tmp_path, slack, mode="webhook", slack_signing_secret=SECRET)
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], [TOP])
    assert deliver(settings, incident_id, SlackEvent.INVESTIGATION).status == "delivered"
    [post] = slack.webhook_posts()
    elements = [e for b in post.payload["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert elements and all("url" in e for e in elements), "an incoming webhook cannot be clicked back"
    assert not any(b.get("block_id") == "rca_actions" for b in post.payload["blocks"])


# --------------------------------------------------------------------------- clicks


def test_confirm_records_the_feedback_by_the_slack_user_and_updates_the_message_in_place(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    incident_id, investigation_id = posted_incident(settings, slack)
    recorded = clicks("recorded")
    answer = click(client, payload(slack, pressed(buttons(slack)["rca_confirm"])))
    assert answer.status_code == 200 and answer.content == b"", "an empty 200: Slack's acknowledgement"
    assert clicks("recorded") == recorded + 1
    [row] = feedback_rows(settings.effective_database_url)
    assert (row.incident_id, row.investigation_id, row.category, row.author) == (
        incident_id,
        investigation_id,
        TOP,
        AUTHOR,
    )
    assert row.verdicts == [{"rank": 1, "correct": True}, {"rank": 2, "correct": False}]
    assert (
        recorder.notified == [(incident_id, "action")] and slack_owed(settings.effective_database_url, incident_id)[1]
    )
    assert slack.responses() == [], "nothing to tell who clicked"

    [post] = slack.posts()
    assert deliver(settings, incident_id, SlackEvent.ACTION).status == "delivered"
    [update] = slack.updates()
    sent = json.loads(post.answer)
    confirmed = {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f":white_check_mark: Confirmed by {AUTHOR}: `{TOP}`"}],
    }
    assert update.path == "/api/chat.update"
    assert (update.payload["channel"], update.payload["ts"]) == (sent["channel"], sent["ts"])
    assert update.payload["blocks"] == [post.payload["blocks"][0], confirmed, *post.payload["blocks"][1:]]
    assert slack.replies() == [], "no thread reply: the evidence did not change"
    assert slack_owed(settings.effective_database_url, incident_id)[1] is None, "settled"


def test_with_the_embedded_runner_the_click_updates_the_message_by_itself(settings: Settings, slack: FakeSlack) -> None:
    """`rca serve` without a broker: its own dispatcher queues the delivery that edits the message."""
    incident_id, _ = posted_incident(settings, slack)
    with TestClient(create_app(settings)) as client:
        assert click(client, payload(slack, chosen(buttons(slack)["rca_pick"], SECOND))).status_code == 200
        [update] = wait_for(slack.updates, 30, "the message updated after the click")
    said = [e["text"] for b in update.payload["blocks"] if b["type"] == "context" for e in b["elements"]]
    assert f":white_check_mark: Confirmed by {AUTHOR}: `{SECOND}`" in said
    assert slack_owed(settings.effective_database_url, incident_id)[1] is None


def test_pick_another_records_the_cause_chosen(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    incident_id, _ = posted_incident(settings, slack)
    assert click(client, payload(slack, chosen(buttons(slack)["rca_pick"], SECOND))).status_code == 200
    [row] = feedback_rows(settings.effective_database_url)
    assert (row.category, row.author) == (SECOND, AUTHOR)
    assert row.verdicts == [{"rank": 1, "correct": False}, {"rank": 2, "correct": True}]
    assert recorder.notified == [(incident_id, "action")]


def test_a_user_without_a_username_is_named_by_their_name(
    client: TestClient, settings: Settings, slack: FakeSlack
) -> None:
    posted_incident(settings, slack)
    user = {"id": "U0TEST2", "name": "bob"}
    assert click(client, payload(slack, pressed(buttons(slack)["rca_confirm"]), user)).status_code == 200
    assert [r.author for r in feedback_rows(settings.effective_database_url)] == ["slack:bob (U0TEST2)"]


def test_investigate_again_queues_a_new_investigation_and_says_who_asked(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    incident_id, investigation_id = posted_incident(settings, slack)
    assert click(client, payload(slack, pressed(buttons(slack)["rca_investigate_again"]))).status_code == 200
    url = settings.effective_database_url
    queued = rows(
        url,
        select(InvestigationRow.id, InvestigationRow.status, InvestigationRow.requested_by).where(
            InvestigationRow.id > investigation_id
        ),
    )
    assert [(r.status, r.requested_by) for r in queued] == [("queued", AUTHOR)]
    assert recorder.enqueued == [queued[0].id] and recorder.notified == [(incident_id, "action")]
    assert feedback_rows(url) == []

    assert click(client, payload(slack, pressed(buttons(slack)["rca_investigate_again"]))).status_code == 200
    assert recorder.enqueued == [queued[0].id], "the one queued answers a second click"

    assert deliver(settings, incident_id, SlackEvent.ACTION).status == "delivered"
    [update] = slack.updates()
    asked = {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f":arrows_counterclockwise: Re-investigating, asked by {AUTHOR}"}],
    }
    assert update.payload["blocks"][1] == asked


def test_a_click_on_a_link_button_is_acknowledged_and_does_nothing(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    posted_incident(settings, slack)
    link = {"action_id": "link-0", "block_id": "x", "type": "button", "value": None}
    assert click(client, payload(slack, link)).status_code == 200
    assert feedback_rows(settings.effective_database_url) == [] and recorder.notified == []


# --------------------------------------------------------------------------- what a click cannot do


def test_an_unknown_cause_is_told_to_who_clicked_and_not_recorded(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    incident_id, investigation_id = posted_incident(settings, slack)
    value = json.dumps({"incident": incident_id, "investigation": investigation_id, "cause": "gremlins"})
    refused = clicks("refused")
    answer = click(client, payload(slack, {"action_id": "rca_confirm", "type": "button", "value": value}))
    assert answer.status_code == 200
    assert feedback_rows(settings.effective_database_url) == [] and recorder.notified == []
    [told] = slack.responses()
    assert told.payload["response_type"] == "ephemeral" and told.payload["replace_original"] is False
    assert told.payload["text"].startswith("Not recorded: category 'gremlins' is not a taxonomy id; use one of ")
    assert clicks("refused") == refused + 1


def test_a_verdict_on_a_superseded_investigation_is_refused(
    client: TestClient, settings: Settings, slack: FakeSlack
) -> None:
    incident_id, investigation_id = posted_incident(settings, slack)
    old = buttons(slack)["rca_confirm"]
    newer = store_investigation(settings.effective_database_url, incident_id, ["queue_median"], [SECOND])
    assert click(client, payload(slack, pressed(old))).status_code == 200
    assert feedback_rows(settings.effective_database_url) == []
    [told] = slack.responses()
    assert told.payload["text"] == (
        f"Not recorded: investigation {investigation_id} was superseded by investigation {newer}; "
        "judge the newer one (the message now shows it)"
    )


def test_an_incident_gone_is_told_not_a_500(client: TestClient, settings: Settings, slack: FakeSlack) -> None:
    posted_incident(settings, slack)
    for action_id in ("rca_confirm", "rca_investigate_again"):
        value = json.dumps({"incident": 999999, "investigation": 1, "cause": TOP})
        assert (
            click(client, payload(slack, {"action_id": action_id, "type": "button", "value": value})).status_code == 200
        )
    assert [r.payload["text"] for r in slack.responses()] == ["Incident #999999 no longer exists."] * 2


# --------------------------------------------------------------------------- the signature


def test_a_wrong_secret_a_stale_or_replayed_timestamp_and_a_changed_body_are_401(
    client: TestClient, settings: Settings, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    posted_incident(settings, slack)
    data = payload(slack, pressed(buttons(slack)["rca_confirm"]))
    body = urlencode({"payload": json.dumps(data)})
    now = int(time.time())
    unsigned = clicks("unsigned")
    refused = [
        signed(body, secret="not-the-app-secret"),
        signed(body, at=now - 301),  # older than 5 minutes
        signed(body, at=now + 400),  # from the future
        {**signed(body), "X-Slack-Request-Timestamp": "soon"},
        {k: v for k, v in signed(body).items() if k != "X-Slack-Signature"},
        {k: v for k, v in signed(body).items() if k != "X-Slack-Request-Timestamp"},
    ]
    for headers in refused:
        answer = client.post("/slack/interactivity", content=body, headers=headers)
        assert answer.status_code == 401, headers
        assert "signature" in answer.json()["detail"]
    changed = body.replace("alice", "mallory")
    assert client.post("/slack/interactivity", content=changed, headers=signed(body)).status_code == 401

    # A request Slack really signed, captured and sent again ten minutes later.
    captured = signed(body, at=now - 600)
    assert client.post("/slack/interactivity", content=body, headers=captured).status_code == 401
    assert clicks("unsigned") == unsigned + len(refused) + 2
    assert feedback_rows(settings.effective_database_url) == [] and recorder.notified == []
    assert client.post("/slack/interactivity", content=body, headers=signed(body)).status_code == 200, "the control"
    assert len(feedback_rows(settings.effective_database_url)) == 1


def test_without_a_signing_secret_the_endpoint_is_off(
    pg_db: str, tmp_path: Path, slack: FakeSlack, recorder: RecordingDispatcher
) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    posted_incident(settings, slack)
    with TestClient(create_app(settings, recorder)) as client:
        answer = click(client, payload(slack, pressed(buttons(slack)["rca_confirm"])))
    assert answer.status_code == 404 and "RCA_SLACK_SIGNING_SECRET" in answer.json()["detail"]
    assert feedback_rows(pg_db) == [] and recorder.notified == []


# --------------------------------------------------------------------------- malformed payloads

CONFIRM = {"action_id": "rca_confirm", "type": "button", "value": '{"incident":1,"investigation":1,"cause":"x"}'}


@pytest.mark.parametrize(
    ("body", "content_type", "wanted"),
    [
        ('{"type": "block_actions"}', "application/json", "expected application/x-www-form-urlencoded"),
        ("payload=%7B&other=1", None, "exactly one field, payload; got other, payload"),
        ("nothing-here", None, "the body is not a form"),
        ("payload=%7Bnot+json", None, "body is not valid JSON"),
        (
            urlencode({"payload": json.dumps({"type": "view_submission"})}),
            None,
            "payload.type: Input should be 'block_actions'",
        ),
        (
            urlencode({"payload": json.dumps({"type": "block_actions", "user": ALICE, "actions": []})}),
            None,
            "payload.actions: List should have at least 1 item",
        ),
        (
            urlencode(
                {"payload": json.dumps({"type": "block_actions", "user": {"username": "x"}, "actions": [CONFIRM]})}
            ),
            None,
            "payload.user.id: Field required",
        ),
        (
            urlencode(
                {
                    "payload": json.dumps(
                        {"type": "block_actions", "user": ALICE, "actions": [{**CONFIRM, "value": "42"}]}
                    )
                }
            ),
            None,
            "payload.actions.0: the value of rca_confirm is not one this service sent",
        ),
        (
            urlencode(
                {
                    "payload": json.dumps(
                        {
                            "type": "block_actions",
                            "user": ALICE,
                            "actions": [{**CONFIRM, "value": '{"incident":1,"investigation":1}'}],
                        }
                    )
                }
            ),
            None,
            "payload.actions.0: the value of rca_confirm names no cause",
        ),
        (
            urlencode(
                {
                    "payload": json.dumps(
                        {
                            "type": "block_actions",
                            "user": ALICE,
                            "actions": [CONFIRM],
                            "response_url": "http://example.com/x",
                        }
                    )
                }
            ),
            None,
            "payload.response_url: Value error, must be an https:// URL",
        ),
    ],
)
def test_a_malformed_payload_is_a_400_naming_what_is_wrong(
    client: TestClient,
    settings: Settings,
    recorder: RecordingDispatcher,
    body: str,
    content_type: str | None,
    wanted: str,
) -> None:
    headers = signed(body)
    if content_type:
        headers["Content-Type"] = content_type
    answer = client.post("/slack/interactivity", content=body, headers=headers)
    assert answer.status_code == 400, answer.text
    assert wanted in answer.json()["detail"]
    assert feedback_rows(settings.effective_database_url) == [] and recorder.notified == [] and recorder.enqueued == []
