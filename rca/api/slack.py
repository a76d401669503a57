"""`POST /slack/interactivity`: the incident message's buttons, clicked in Slack (docs/slack.md).

Slack cannot send a bearer token: the request's signature is its authentication. Slack signs
`v0:<X-Slack-Request-Timestamp>:<body>` with the app's signing secret (HMAC-SHA256, in
`X-Slack-Signature`), and `slack_sdk`'s `SignatureVerifier` refuses a wrong signature and a
timestamp more than 5 minutes from now (a replay):
https://docs.slack.dev/authentication/verifying-requests-from-slack. Without
RCA_SLACK_SIGNING_SECRET the endpoint answers 404: nothing could prove a click came from Slack.

The body is form-encoded, one field `payload` holding the `block_actions` JSON
(https://docs.slack.dev/reference/interaction-payloads/block_actions-payload). Slack wants a 200
within 3 seconds: the click is recorded in one short transaction and acknowledged with an empty
200; the message is brought up to date by the Slack delivery, queued after the commit, which
re-renders it from the incident (chat.update of the stored message). What the click could not do
(an unknown cause, a superseded investigation) is told to who clicked, as an ephemeral message at
the payload's `response_url`, after the answer has gone: never as a 500.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal
from urllib.parse import parse_qs

from fastapi import APIRouter, BackgroundTasks, HTTPException, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from slack_sdk.signature import SignatureVerifier
from sqlalchemy import select

from rca import metrics
from rca.api.incidents import record_feedback, request_investigation
from rca.api.jsonbody import decode
from rca.api.schemas import FeedbackIn, Verdict
from rca.config import Settings
from rca.config.settings import check_slack_url
from rca.domain.status import SlackEvent
from rca.incidents.feedback import FeedbackError
from rca.jobs.dispatch import Dispatcher
from rca.notify import actions
from rca.notify.delivery import respond
from rca.store.db import session_scope
from rca.store.models import HypothesisRow, IncidentRow

log = logging.getLogger(__name__)

FORM = "application/x-www-form-urlencoded"
NAME = r"^[^\x00-\x1f\x7f]{1,80}$"  # a Slack user name: one line, no control characters


def _slack_url(url: str) -> str:
    check_slack_url(url)
    return url


class User(BaseModel):
    id: str = Field(pattern=r"^[A-Z0-9]{1,32}$")
    username: str | None = Field(default=None, pattern=NAME)
    name: str | None = Field(default=None, pattern=NAME)


class Option(BaseModel):
    value: str = Field(max_length=2000)


class Action(BaseModel):
    action_id: str = Field(max_length=255)
    value: str | None = Field(default=None, max_length=2000)  # a button's
    selected_option: Option | None = None  # a static_select's


class Click(BaseModel):
    """The fields of a `block_actions` payload the service reads (Slack sends many more)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["block_actions"]
    user: User
    actions: list[Action] = Field(min_length=1, max_length=1)  # one click, one action
    response_url: Annotated[str, AfterValidator(_slack_url)] | None = None

    @property
    def author(self) -> str:
        """The feedback's author: `slack:<username> (<user id>)`."""
        return f"slack:{self.user.username or self.user.name or 'unknown'} ({self.user.id})"


def _bad(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, detail=detail)


def _click(body: bytes, content_type: str) -> Click:
    """The form's one `payload` field, as JSON, as a `block_actions` payload: 400 naming what is wrong."""
    if content_type.split(";")[0].strip().lower() != FORM:
        raise _bad(f"expected {FORM} (Slack's interactivity request), got {content_type or 'no Content-Type'}")
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=8, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"the body is not a form: {exc}") from None
    if set(form) != {"payload"} or len(form["payload"]) != 1:
        raise _bad(f"the form must have exactly one field, payload; got {', '.join(sorted(form)) or 'none'}")
    document = decode(form["payload"][0].encode(), ("payload",))
    try:
        return Click.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in ("payload", *first["loc"]))
        raise _bad(f"{where}: {first['msg']}") from None


def _shown(action: Action) -> actions.Shown:
    """What the clicked element showed: its value (a button's) or its chosen option's (a select's)."""
    raw = action.selected_option.value if action.selected_option else action.value
    try:
        return actions.Shown.model_validate_json(raw or "")
    except ValidationError as exc:
        raise _bad(
            f"payload.actions.0: the value of {action.action_id} is not one this service sent: {exc.errors()[0]['msg']}"
        ) from None


def _confirm(settings: Settings, dispatcher: Dispatcher, shown: actions.Shown, author: str) -> str | None:
    """Record the cause the click named, judged against the investigation the message showed."""
    cause = shown.cause or ""
    try:
        with session_scope(settings.effective_database_url) as session:
            if session.get(IncidentRow, shown.incident) is None:
                return f"Incident #{shown.incident} no longer exists."
            ranked = session.execute(
                select(HypothesisRow.rank, HypothesisRow.category).where(
                    HypothesisRow.investigation_id == shown.investigation
                )
            ).all()
            body = FeedbackIn(category=cause, hypotheses=[Verdict(rank=r, correct=c == cause) for r, c in ranked])
            record_feedback(session, shown.incident, body, author, shown=shown.investigation, slack=True)
    except (FeedbackError, ValidationError) as exc:
        return f"Not recorded: {exc}"
    dispatcher.notify(shown.incident, SlackEvent.ACTION)
    return None


def act(settings: Settings, dispatcher: Dispatcher, click: Click) -> tuple[str, str | None]:
    """Do what the click asked: (the outcome for the metrics, what to tell who clicked, if anything).
    A click on a link button also arrives here; it asks nothing."""
    action = click.actions[0]
    if action.action_id not in (actions.CONFIRM, actions.PICK, actions.AGAIN):
        return "ignored", None
    shown = _shown(action)
    if action.action_id == actions.AGAIN:
        answer = request_investigation(settings, dispatcher, shown.incident, click.author, slack=True)
        return ("queued", None) if answer is not None else ("refused", f"Incident #{shown.incident} no longer exists.")
    if shown.cause is None:
        raise _bad(f"payload.actions.0: the value of {action.action_id} names no cause")
    refused = _confirm(settings, dispatcher, shown, click.author)
    return ("refused", refused) if refused else ("recorded", None)


router = APIRouter()


# Left out of the OpenAPI document, as /metrics is: Slack's protocol (a signed form, an empty 200),
# not the JSON API; docs/slack.md and docs/api.md describe it.
@router.post("/slack/interactivity", include_in_schema=False)
async def interactivity(request: Request, background: BackgroundTasks) -> Response:
    """A click: 404 while interactivity is off, 401 for a bad signature, 400 for a payload that is
    not Slack's, else an empty 200 once the click is recorded or queued."""
    settings: Settings = request.app.state.settings
    if settings.slack_signing_secret is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail="Slack interactivity is off: set RCA_SLACK_SIGNING_SECRET (or RCA_SLACK_SIGNING_SECRET_FILE) "
            "to the Slack app's signing secret",
        )
    body = await request.body()
    verifier = SignatureVerifier(settings.slack_signing_secret.get_secret_value())
    timestamp = request.headers.get("x-slack-request-timestamp", "")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12) or not verifier.is_valid(
        body, timestamp, request.headers.get("x-slack-signature")
    ):
        metrics.SLACK_ACTIONS.labels(outcome="unsigned").inc()
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="the Slack signature is missing or wrong, or X-Slack-Request-Timestamp is over 5 minutes off",
        )
    click = _click(body, request.headers.get("content-type", ""))
    outcome, tell = await run_in_threadpool(act, settings, request.app.state.dispatcher, click)
    metrics.SLACK_ACTIONS.labels(outcome=outcome).inc()
    if tell is not None:
        if click.response_url is None:
            log.warning("slack: a click by %s could not be done and has no response_url: %s", click.author, tell)
        else:
            background.add_task(_tell, settings, click.response_url, tell)
    return Response(status_code=status.HTTP_200_OK)


def _tell(settings: Settings, response_url: str, text: str) -> None:
    result = respond(response_url, text, settings.slack_timeout_seconds)
    if not result.ok:
        log.warning("slack: the ephemeral answer was not delivered (%s)", result.error)
