"""The words shared about the fleet scan's early warnings (rca/scan): what marks an incident as
one, and how far ahead of the SLA alert it came, said the same way in Slack and on the page."""

from __future__ import annotations

from datetime import datetime

ORIGIN = "early_warning"  # Incident.origin of the scan's incidents; the others are "alertmanager"
# Incident.origin of the warnings a replay of the scan over history stored (`rca backtest --store`):
# past episodes, shown and searchable like the scan's own, never posted to Slack nor joined by an alert.
BACKTEST = "backtest"
SCANNED = (ORIGIN, BACKTEST)  # the origins whose incident the scan opened: its own alert and transitions
ALERTNAME = "EarlyWarning"  # the scan's own alert in its incident; any other alert there joined it


def lead(fired_at: datetime, warned_at: datetime) -> str:
    """When an SLA alert fired relative to the warning: "9 min after" (or "3 min before", when the
    alert had started before the scan warned, e.g. Alertmanager's `for:` delayed its webhook); in
    seconds under two minutes, where "0 min after" would hide which came first."""
    seconds = (fired_at - warned_at).total_seconds()
    amount = f"{abs(seconds):.0f} s" if abs(seconds) < 120 else f"{abs(seconds) / 60:.0f} min"
    return f"{amount} after" if seconds >= 0 else f"{amount} before"
