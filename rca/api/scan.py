"""`GET /api/v1/scan/targets`: the fleet scan's targets as it last stored them (their state, since
when, the early-warning incident) and the TTFT SLO each is judged against, with where that came
from: the operator's alerting rule, the config file or the default (rca/scan/slo_rules.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from rca.api.auth import require_read
from rca.api.deps import DatabaseSession
from rca.api.schemas import AUTH_ERRORS, ScanTargetOut, ScanTargetsOut
from rca.api.storable import require_storable_query
from rca.store import early_warnings

router = APIRouter(
    prefix="/api/v1/scan", dependencies=[Depends(require_read), Depends(require_storable_query)], responses=AUTH_ERRORS
)


@router.get(
    "/targets",
    response_model=ScanTargetsOut,
    summary="The fleet scan's targets, their state and their SLO",
    description="Every serving target the scan has judged, by instance: its early-warning state and since "
    "when, its incident while warning or cleared, and the TTFT SLO it is judged against with its source "
    "(`rule <alert> (group <group>, <file>)`, `config file` or `default`). Written by the scan when a target "
    "changes state or its SLO changes; empty while the scan is off.",
)
def scan_targets(
    session: DatabaseSession,
    state: Annotated[
        Literal["ok", "watch", "warning", "cleared"] | None, Query(description="only the targets in this state")
    ] = None,
) -> ScanTargetsOut:
    rows = early_warnings.targets(session, state)
    return ScanTargetsOut(items=[ScanTargetOut.model_validate(row) for row in rows])
