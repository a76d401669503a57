"""A backtest's warnings kept as incidents (`rca backtest --store`): what the scan would have
raised over that history, browsable and searchable beside the live ones (`origin=backtest`).

Each warning episode of the replay becomes one resolved incident of origin `backtest`: one
`EarlyWarning` alert from when it warned to when it cleared (or to the replay's end), the live
scan's summary, and the episode's transitions with their reasons and figures, so its page reads
as a live warning's. Group key and alert fingerprint name the instance and the time it warned:
storing the same episode again finds it and skips it (a unique index keeps it once even when two
runs store it at the same moment: `store_all`), and no Alertmanager notification joins it
(`rca.store.early_warnings` joins only incidents of origin `early_warning`). What the live scan
owns is left alone: no `scan_targets` row is written, no live incident touched, and nothing is
owed to Slack (`rca.store.notices.owe` and the delivery skip this origin). No investigation is
queued: the pipeline judges the signals of the hours before now (`rca.collect.prometheus.
choose_window` ends its window at the run's own time), not of the hours before the warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from rca.domain.early_warning import BACKTEST
from rca.domain.status import AlertStatus
from rca.incidents.locks import after_change
from rca.incidents.warnings import open_warning, set_warning
from rca.scan.backtest import BacktestResult, Episode
from rca.scan.states import Policy
from rca.scan.warnings import alert_labels, summary, transition_row
from rca.store.db import session_scope
from rca.store.models import IncidentRow


@dataclass(frozen=True)
class Stored:
    """What a store did: the incidents it wrote, and how many episodes were there already."""

    incident_ids: list[int]
    already_stored: int


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def group_key(episode: Episode) -> str:
    """The episode's name: its instance and when it warned (to the second, UTC)."""
    return f"{BACKTEST}/{episode.instance}/{_utc(episode.start):%Y-%m-%dT%H:%M:%SZ}"


def store_all(url: str, result: BacktestResult, policy: Policy) -> Stored:
    """Store every warning of `result` not stored before, in one transaction: all or none. When
    another run stored some of the same episodes meanwhile (the unique index on a backtest's group
    key refuses the second copy), store again: this time they are found and skipped."""
    try:
        return _store_committed(url, result, policy)
    except IntegrityError:
        return _store_committed(url, result, policy)


def _store_committed(url: str, result: BacktestResult, policy: Policy) -> Stored:
    with session_scope(url) as session:
        return store(session, result, policy)


def store(session: Session, result: BacktestResult, policy: Policy) -> Stored:
    """Store every warning of `result` not stored before, in the caller's transaction."""
    keys = {group_key(episode): episode for episode in result.warnings}
    there = set(
        session.scalars(
            select(IncidentRow.group_key).where(IncidentRow.origin == BACKTEST, IncidentRow.group_key.in_(list(keys)))
        )
    )
    ids = [
        _store_episode(session, key, episode, result.end, policy) for key, episode in keys.items() if key not in there
    ]
    return Stored(ids, len(there))


def _store_episode(session: Session, key: str, episode: Episode, replay_end: float, policy: Policy) -> int:
    if episode.serving is None or episode.assessment is None:
        raise ValueError(f"{episode.instance}: the episode has no instance or assessment (frames without them)")
    warned, resolved = _utc(episode.start), _utc(episode.end if episode.end is not None else replay_end)
    text = summary(episode.assessment, policy)
    if episode.end is None:
        text += f"; still warning when the backtest ended at {resolved:%Y-%m-%d %H:%M} UTC"
    incident = open_warning(
        session,
        origin=BACKTEST,
        key=key,
        title=f"Backtest warning: {episode.instance}",
        labels=alert_labels(episode.serving) | {"backtest": "true"},
        text=text,
        warned_at=warned,
        created_at=warned,  # the page and a search by time place it when it would have warned
    )
    set_warning(session, incident, AlertStatus.RESOLVED, at=resolved)
    session.add_all(transition_row(episode.instance, t, incident.id) for t in episode.transitions)
    after_change(session, incident.id, owe_slack=False)
    return incident.id
