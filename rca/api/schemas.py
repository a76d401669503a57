"""Response shapes of the HTTP API (also what `rca investigate --json` prints)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rca.api.derive import model_of, public
from rca.api.errors import VALIDATION_ERROR
from rca.api.storable import problem
from rca.diagnosis.ranking import taxonomy
from rca.domain.coverage import data_gap
from rca.domain.evidence import Finding, Hypothesis, onset_order
from rca.domain.factor import CommonFactor
from rca.domain.status import InvestigationStatus
from rca.queries.incidents import TOTAL_CAP, Page
from rca.store.incidents import Hit
from rca.store.rounds import FleetRound


# The bases below are computed (rca.api.derive.model_of), which mypy cannot follow: hence `misc`.
class FindingOut(model_of(Finding, rename={"key": "id"})):  # type: ignore[misc]
    """One finding; `id` is its signal id (hypotheses cite it), unique within the investigation."""


class HypothesisOut(model_of(Hypothesis, exclude=("score",))):  # type: ignore[misc]
    """One ranked root cause, citing findings by id."""


def findings_out(rows: list[Any]) -> list[Any]:
    """Stored findings keep their public id in `key` (the integer id is internal)."""
    public = [name for name in FindingOut.model_fields if name != "id"]
    return [FindingOut(id=row.key, **{name: getattr(row, name) for name in public}) for row in rows]


class InvestigationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    status: str = Field(
        description="queued, running, done (causes ranked from the evidence), inconclusive (no evidence could "
        "be read: no cause is ranked, see `inconclusive_reason` and `data_gap`) or failed (see `error`)"
    )
    reason: str = Field(
        description="why it was queued: new_incident, new_alerts (alerts joined), early_warning, requested "
        "(asked for: `POST /api/v1/incidents/{id}/investigations`, the page's button, `rca investigate-again`) "
        "or rerun (`rca demo` run again on its incident)"
    )
    requested_by: str | None = Field(
        None, description="who asked for a `requested` one: the API token's name, or `cli` for `rca investigate-again`"
    )
    inconclusive_reason: str | None = Field(
        None,
        description="why an inconclusive investigation read no evidence: no_prometheus (RCA_PROMETHEUS_URL unset), "
        "prometheus_unreachable (see `error`) or no_data (no signal of the target could be measured)",
    )
    data_gap: str | None = Field(
        None,
        description="what a finished investigation could not see, in a sentence: why it could not investigate, "
        "or which signals had no data and were not checked; null when it saw every signal the stack exports",
    )
    host: str | None = Field(
        None,
        description="the host this investigation is about, when the incident's alerts name several (one "
        "investigation per host, queued together as a round); null: the incident investigated as one target",
    )
    round_id: int | None = Field(
        None, description="the round it was queued in with the incident's other hosts (its first investigation's id)"
    )
    round_skipped: int | None = Field(
        None,
        description="hosts the alerts named beyond RCA_FLEET_MAX_HOSTS when the round was queued, not investigated",
    )
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    collect_seconds: float | None
    total_seconds: float | None
    error: str | None
    analyst: str | None
    window_start: datetime | None
    window_end: datetime | None
    step_seconds: int | None
    target: dict[str, Any] | None
    findings: list[FindingOut]
    hypotheses: list[HypothesisOut]
    margin: float | None = Field(description="confidence of the first answer minus that of the second")
    onset_order: list[str] = Field(description="breached finding ids, earliest onset first: what moved first")
    # The analyst's accounting (docs/analyst.md); `analyst` says who wrote the hypotheses.
    llm_model: str | None = None
    llm_output_mode: str | None = Field(None, description="json_schema | json_object | prompt")
    prompt_tokens: int | None = Field(None, description="as the LLM server counted them, all calls")
    completion_tokens: int | None = None
    prompt_tokens_estimate: int | None = Field(None, description="the pre-call budget estimate")
    llm_latency_seconds: float | None = None
    estimated_cost: float | None = Field(None, description="tokens times RCA_LLM_PRICE_PER_1K_*")
    fallback_reason: str | None = Field(None, description="why the rules analyst wrote the hypotheses")
    disagreement: dict[str, Any] | None = Field(None, description="the LLM's first cause is contradicted")
    answer_key: str | None = Field(None, description="the LLM answer cache's key: model, endpoint, target, evidence")
    change_key: str | None = Field(None, description="hash of what Slack shows: breached findings, rules' top causes")
    cached_from: int | None = Field(None, description="investigation whose LLM answer was reused")
    prompt_trimmed: list[str] | None = Field(None, description="what was cut to fit the prompt budget")
    llm_dropped: list[dict[str, Any]] | None = Field(None, description="LLM hypotheses refused, with why")
    llm_exchange: list[dict[str, Any]] | None = Field(None, description="audit: exact prompts, raw responses")

    @classmethod
    def from_row(cls, row: Any) -> InvestigationOut:
        computed = ("findings", "hypotheses", "margin", "onset_order", "data_gap")
        data = {name: getattr(row, name) for name in cls.model_fields if name not in computed}
        hypotheses = [HypothesisOut.model_validate(h) for h in row.hypotheses]
        margin = round(hypotheses[0].confidence - hypotheses[1].confidence, 3) if len(hypotheses) > 1 else None
        # Only a run of the pipeline judged something (its `error` is then Prometheus'), as Slack reads it.
        judged = row.status in (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE) and (
            row.findings or row.error
        )
        gap = data_gap(row.findings, row.error) if judged else None
        return cls(
            **data,
            findings=findings_out(row.findings),
            hypotheses=hypotheses,
            margin=margin,
            onset_order=onset_order(row.findings),
            data_gap=gap.text if gap else None,
        )


class AlertOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    fingerprint: str
    alertname: str | None
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str | None
    first_seen_at: datetime = Field(
        description="when the service first received it: for an SLA alert in an early-warning incident, when it joined"
    )


SUMMARY_NAMES = {"incident_id": "id"}


# A computed base, as for FindingOut.
class IncidentSummary(
    model_of(  # type: ignore[misc]
        Hit,
        rename=SUMMARY_NAMES,
        fields={
            "investigation_status": Field(
                description="status of the newest investigation: queued, running, done, inconclusive or failed"
            ),
            "inconclusive_reason": Field(
                default=None,
                description="when the newest investigation is inconclusive: why it read no evidence "
                "(no_prometheus, prometheus_unreachable, no_data)",
            ),
            "top_category": Field(
                description="top-ranked root cause of the latest done investigation; null while none ranked one "
                "(an inconclusive investigation never does)"
            ),
            "confirmed_category": Field(default=None, description="root cause an engineer confirmed"),
            "breached": Field(default_factory=list, description="breached finding ids of the latest finished run"),
            "score": Field(default=None, description="full-text relevance (only when `q` is given)"),
        },
    )
):
    """One incident of a result page: what a list shows, without the large text and JSON."""

    @classmethod
    def of(cls, hit: Hit) -> IncidentSummary:
        return cls(**public(hit, SUMMARY_NAMES))


class EvidenceSeriesOut(BaseModel):
    """One finding's series as kept at investigation time (rca/domain/series.py): downsampled to a
    regular grid, `values[i]` at `start + i * step_seconds`, null where Prometheus had no sample."""

    finding: str = Field(description="the finding's id (`findings[].id` of the investigation)")
    labels: dict[str, str] = Field(description="the series' labels (at most 20, values cut to 200 characters)")
    start: datetime
    step_seconds: int = Field(description="seconds between values: a multiple of the investigation's step")
    values: list[float | None] = Field(description="at most 300; each bucket's sample on the breach side")
    baseline_end: datetime | None = Field(description="the baseline period runs from `start` to here")


class EvidenceOut(BaseModel):
    """The series kept with one investigation of an incident (at most 32, breached findings first)."""

    incident_id: int
    investigation_id: int | None = Field(
        description="the investigation read: the one asked for, else the latest finished one (null: none finished)"
    )
    series: list[EvidenceSeriesOut]


class SlackAttemptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    at: datetime
    event: str
    action: str
    outcome: str
    http_status: int | None
    error: str | None
    retry_after: float | None


class SlackDeliveryOut(BaseModel):
    """The incident's Slack message and every attempt to deliver it (never the token or webhook URL)."""

    model_config = ConfigDict(from_attributes=True)

    mode: str
    status: str
    channel: str | None
    ts: str | None
    messages: int
    updates: int
    resolved_notified_at: datetime | None
    last_error: str | None
    updated_at: datetime
    attempts: list[SlackAttemptOut]


class FleetHostOut(BaseModel):
    host: str
    confidence: float


class FleetCauseOut(BaseModel):
    category: str
    hosts: list[FleetHostOut] = Field(description="the hosts whose first cause this is, by name, with its confidence")


class CommonFactorOut(BaseModel):
    """What a fleet incident's affected hosts share that their healthy peers lack (rca.domain.factor)."""

    verdict: str = Field(
        description="found: a factor separates them; none: no factor does; unjudged: no healthy peer measured, "
        "nothing to compare with (never a claim)"
    )
    attribute: str | None = Field(
        None,
        description="image, engine_config:<flag> (vllm:cache_config_info), model, node, node_label:<name> "
        "(kube_node_labels), or rollout (every affected host started shortly before onset); null unless found",
    )
    value: str | None = None
    affected: int = Field(description="affected hosts that have it")
    affected_of: int = Field(description="affected hosts measured for it (all of them, when found)")
    healthy: int = Field(description="healthy peers that have it")
    healthy_of: int = Field(description="healthy peers measured for it")
    affected_hosts: int = Field(description="affected hosts (those the alerts name)")
    healthy_hosts: int = Field(description="healthy peers: the same model (else namespace, else job), not alerting")
    rollout_minutes: int | None = Field(
        None, description="the affected hosts (re)started this many minutes before onset, and few healthy ones did"
    )
    next_step: str | None = None
    line: str = Field(description="the same in words, as Slack shows it")

    @classmethod
    def of(cls, factor: CommonFactor) -> CommonFactorOut:
        return cls(**factor.to_dict(), line=factor.line())


class FleetOut(BaseModel):
    """A fleet incident's latest round: its hosts grouped by their first cause (rca.domain.fleet)."""

    round_id: int
    fleet_wide: str | None = Field(
        description="the cause every host investigated finished with first (two hosts or more); null when they differ, "
        "or some host has no answer yet"
    )
    causes: list[FleetCauseOut] = Field(description="most hosts first")
    inconclusive: list[str] = Field(description="hosts whose investigation could read no evidence")
    failed: list[str]
    unfinished: list[str] = Field(description="hosts whose investigation is queued or running still")
    skipped: int = Field(description="hosts the alerts named beyond RCA_FLEET_MAX_HOSTS, not investigated")
    summary: list[str] = Field(description="the same in a few lines of words, as Slack shows them")
    common_factor: CommonFactorOut | None = Field(
        None,
        description="what the affected hosts share that their healthy peers lack, with the counts and a next step; "
        "null when it was not judged (Prometheus unreadable, or an investigation from before it was)",
    )

    @classmethod
    def of(cls, fleet: FleetRound) -> FleetOut:
        summary = fleet.summary
        return cls(
            round_id=fleet.round_id,
            fleet_wide=summary.fleet_wide,
            causes=[
                FleetCauseOut(
                    category=group.category, hosts=[FleetHostOut(host=h, confidence=c) for h, c in group.hosts]
                )
                for group in summary.causes
            ],
            inconclusive=summary.inconclusive,
            failed=summary.failed,
            unfinished=summary.unfinished,
            skipped=summary.skipped,
            summary=summary.lines(),
            common_factor=CommonFactorOut.of(summary.common_factor) if summary.common_factor else None,
        )


class IncidentOut(BaseModel):
    id: int
    group_key: str
    title: str
    status: str
    alertname: str | None
    receiver: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    common_annotations: dict[str, str]
    external_url: str | None
    origin: str = Field(
        default="alertmanager",
        description="alertmanager, early_warning (the fleet scan) or backtest (a warning the scan's replay "
        "over history stored, `rca backtest --store`; never posted to Slack)",
    )
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notification_count: int
    alerts: list[AlertOut]
    investigations: list[InvestigationOut]
    investigation: InvestigationOut | None  # the latest
    fleet: FleetOut | None = Field(
        None,
        description="when the incident's alerts name several hosts: its latest round, one investigation per host "
        "(`investigations` holds each, with its `host`), the hosts grouped by their first cause; null otherwise",
    )
    slack: SlackDeliveryOut | None = None


class IncidentPage(BaseModel):
    items: list[IncidentSummary]
    total: int | None = Field(
        description=f"matching incidents, up to {TOTAL_CAP}: known when the first page holds "
        "them all, otherwise counted only when `total=true` was asked; else null"
    )
    total_exact: bool = Field(
        description=f"true when `total` is the exact count (false when null, or when more "
        f"than {TOTAL_CAP} match and `total` is that cap)"
    )
    limit: int
    sort: str = Field(description="time (newest first) or relevance (best match first)")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")

    @classmethod
    def of(cls, page: Page) -> IncidentPage:
        return cls(
            items=[IncidentSummary.of(hit) for hit in page.hits],
            total=page.total,
            total_exact=page.total_exact,
            limit=page.limit,
            sort=page.sort,
            next_cursor=page.next_cursor,
        )


class AcceptedOut(BaseModel):
    incident_id: int
    created: bool
    investigation_id: int | None
    enqueued: bool


class InvestigationRequestedOut(BaseModel):
    """The answer to `POST /api/v1/incidents/{id}/investigations`."""

    incident_id: int
    investigation_id: int = Field(
        description="the investigation that answers the request: follow it in the incident (a fleet incident's "
        "round, one per host, is queued whole: this is its first, the others share its `round_id`)"
    )
    status: str = Field(description="queued, or running when one already running answered")
    created: bool = Field(description="true: queued now (202); false: one queued or running already answered (200)")
    requested_by: str | None = Field(description="who asked for it, when it is one someone asked for")
    enqueued: bool = Field(
        description="whether the new ones reached the queue (hosts that joined a waiting round included); false "
        "with created: the broker refused one, and the sweeper enqueues it once it has waited RCA_SWEEP_AFTER_SECONDS"
    )


class SimilarIncident(BaseModel):
    incident: IncidentSummary
    score: float = Field(description="0..1: breached set, onset order, stack and top causes alike")
    shared_breached: list[str] = Field(description="breached finding ids both incidents have")
    onset_order: list[str]
    stack: str | None
    confirmed_category: str | None = Field(description="the cause an engineer confirmed, when known")


class SimilarPage(BaseModel):
    incident_id: int
    breached: list[str] = Field(description="this incident's breached finding ids")
    onset_order: list[str]
    stack: str | None
    categories: list[str]
    items: list[SimilarIncident]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=1, le=100, description="rank of the hypothesis in the latest investigation")
    correct: bool


NO_NUL = "^[^\\u0000]*$"  # JSON Schema (ECMA-262) for "no NUL character"


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The schema states what the checks refuse: a category outside the taxonomy, and a NUL, which no
    # database stores (a lone surrogate is refused too; JSON Schema has no way to say so).
    category: str = Field(
        min_length=1,
        max_length=64,
        description="the confirmed root cause: one of the taxonomy's ids",
        json_schema_extra={"enum": list(taxonomy())},
    )
    note: str = Field(
        default="",
        max_length=4000,
        description="what it really was, in the engineer's words (no NUL, no lone surrogate)",
        json_schema_extra={"pattern": NO_NUL},
    )
    hypotheses: list[Verdict] = Field(
        default_factory=list, max_length=100, description="which hypotheses were right or wrong"
    )

    @field_validator("category", "note")
    @classmethod
    def _storable(cls, value: str) -> str:
        found = problem(value)
        if found:
            raise ValueError(found[1])
        return value


class FeedbackOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    incident_id: int
    investigation_id: int | None
    category: str
    note: str
    hypotheses: list[Verdict]
    author: str = Field(description="name of the API token that sent it")
    created_at: datetime


class AccuracyFigures(BaseModel):
    confirmed: int = Field(description="confirmed incidents counted")
    ac_at_1: float | None = Field(description="share whose confirmed cause ranked first")
    ac_at_3: float | None = Field(description="share whose confirmed cause ranked in the top three")


class AccuracyOut(BaseModel):
    undiagnosed: int = Field(
        description="confirmed incidents left out of the figures: no investigation of theirs ranked a cause "
        "(each one inconclusive, failed or not run yet)"
    )
    overall: AccuracyFigures
    by_analyst: dict[str, AccuracyFigures]
    by_category: dict[str, AccuracyFigures]


class ScanTargetOut(BaseModel):
    """One serving target of the fleet scan, as the scan last stored it."""

    model_config = ConfigDict(from_attributes=True)

    instance: str
    host: str
    state: str = Field(description="ok, watch, warning or cleared (docs/early_warning.md)")
    since: datetime = Field(description="when it entered this state (a target that never left ok: first judged)")
    incident_id: int | None = Field(description="its early-warning incident, while warning or cleared")
    slo_ttft_seconds: float | None = Field(description="the TTFT p95 SLO it is judged against (null: not yet stored)")
    slo_source: str | None = Field(
        description="where the SLO came from: `rule <alert> (group <group>, <file>)` (the operator's alerting "
        "rule that covers it), `config file` (slo_ttft_seconds set there) or `default`"
    )
    updated_at: datetime


class ScanTargetsOut(BaseModel):
    """The fleet scan's targets, by instance."""

    items: list[ScanTargetOut]


class ErrorOut(BaseModel):
    """Every error answer but a 422 (which is `ValidationErrorOut`, rca/api/errors.py): one message."""

    detail: str


class ReadinessOut(BaseModel):
    """`/readyz`: each dependency's state. 503 (not ready) when the database or the broker is
    unreachable; else 200, `degraded` while Prometheus is unset or unreachable (alerts are taken and
    kept, but every investigation ends inconclusive, with no cause), `ready` when it answers."""

    status: Literal["ready", "degraded", "not ready"]
    checks: dict[str, str] = Field(
        description='"database" and "broker": "ok" or "unavailable" (why is logged); "queue": embedded (in-process) '
        'or celery; "prometheus": "ok", "not configured" (RCA_PROMETHEUS_URL unset) or "unavailable" (why is logged)'
    )


AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing or invalid bearer token"},
    403: {"model": ErrorOut, "description": "the token lacks the scope this operation needs"},
    **VALIDATION_ERROR,
    503: {"model": ErrorOut, "description": "database unavailable, retry later"},
}
