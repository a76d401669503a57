"""`GET /api/v1/stats/accuracy`: how often the service's ranked causes matched what engineers
confirmed, so the team can judge whether to trust it."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from rca.api.auth import require_read
from rca.api.deps import DatabaseSession
from rca.api.schemas import AUTH_ERRORS, AccuracyOut
from rca.api.storable import require_storable_query
from rca.store import feedback as feedback_store

router = APIRouter(
    prefix="/api/v1/stats", dependencies=[Depends(require_read), Depends(require_storable_query)], responses=AUTH_ERRORS
)


@router.get(
    "/accuracy",
    response_model=AccuracyOut,
    summary="AC@1 and AC@3 over confirmed incidents",
    description="Per analyst (rules, LLM) and per confirmed category; an incident counts once, with its "
    "newest feedback and its latest done investigation. One that no investigation diagnosed (inconclusive: "
    "no evidence could be read) is left out and counted in `undiagnosed`.",
)
def accuracy(session: DatabaseSession) -> AccuracyOut:
    return AccuracyOut.model_validate(feedback_store.accuracy(session))
