"""A fleet incident's latest round of investigations (rca.domain.hosts), read from their rows, and
what it says (rca.domain.fleet): one reading for the API and Slack."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rca.domain.factor import CommonFactor
from rca.domain.fleet import FleetSummary, HostAnswer, summarise
from rca.store.models import InvestigationRow


@dataclass(frozen=True)
class FleetRound:
    """The round's id, its investigations (one per host, by id) and their summary."""

    round_id: int
    investigations: list[InvestigationRow]
    summary: FleetSummary


def answer_of(row: InvestigationRow) -> HostAnswer:
    """One host's investigation as the summary reads it: how it ended and its first cause."""
    top = row.hypotheses[0] if row.hypotheses else None
    return HostAnswer(row.host or "", row.status, top.category if top else None, top.confidence if top else None)


def fleet_round(rows: Sequence[InvestigationRow]) -> FleetRound | None:
    """The round of these rows (one round's, with their hypotheses), None when they are the
    incident investigated as one target."""
    members = sorted((row for row in rows if row.round_id is not None), key=lambda row: row.id)
    if not members:
        return None
    round_id = members[0].round_id
    assert round_id is not None  # a member of a round
    skipped = max(row.round_skipped or 0 for row in members)
    stored = members[0].common_factor  # judged once, by the round's first
    factor = CommonFactor.from_dict(stored) if stored else None
    return FleetRound(round_id, members, summarise([answer_of(row) for row in members], skipped, factor))


def latest_round(investigations: Sequence[InvestigationRow]) -> FleetRound | None:
    """The round the latest of an incident's investigations (oldest first) belongs to, None when
    that one investigated the incident as one target."""
    if not investigations or investigations[-1].round_id is None:
        return None
    round_id = investigations[-1].round_id
    return fleet_round([row for row in investigations if row.round_id == round_id])


def round_of(session: Session, investigation: InvestigationRow) -> FleetRound | None:
    """The round this investigation belongs to, its members read with their findings and
    hypotheses; None for an investigation of the incident as one target."""
    if investigation.round_id is None:
        return None
    rows = session.scalars(
        select(InvestigationRow)
        .where(InvestigationRow.round_id == investigation.round_id)
        .options(selectinload(InvestigationRow.findings), selectinload(InvestigationRow.hypotheses))
    ).all()
    return fleet_round(rows)
