"""`rca backtest`: the early-warning scan replayed over Prometheus history, and its report."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rca.cli.checks import prepare_database
from rca.cli.common import EXIT_FAILED, EXIT_NO_DATA, Command, fail
from rca.cli.logs import report_logging
from rca.config import Settings

if TYPE_CHECKING:
    from rca.scan.backtest import BacktestResult
    from rca.scan.stored import Stored

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`90m`, `6h`, `7d` (Prometheus' units s, m, h, d) as a timedelta."""
    number, unit = text.strip()[:-1], text.strip()[-1:]
    if unit not in DURATION_UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 6h or 7d")
    return timedelta(seconds=int(number) * DURATION_UNITS[unit])


def add_parser(command: Command) -> None:
    backtest = command(
        "backtest",
        "replay the early-warning scan over Prometheus history",
        "Run the fleet scan at every RCA_SCAN_INTERVAL_SECONDS of the past (same queries, forecasts "
        "and states as live, nothing written unless --store) and report each warning, its lead time "
        "before the TTFT SLO breach over the same history, the breaches it missed and the warnings no "
        "breach followed.",
    )
    backtest.add_argument("--since", required=True, type=parse_duration, help="how far back: 90m, 6h, 7d")
    backtest.add_argument("--until", type=parse_duration, help="stop this long before now (default: now)")
    backtest.add_argument("--target", dest="only", help="one serving instance (host:port) instead of the whole fleet")
    backtest.add_argument("--json", action="store_true", help="print the result as JSON")
    backtest.add_argument(
        "--store",
        action="store_true",
        help="store each warning as a resolved incident of origin backtest, with its transitions, in "
        "RCA_DATABASE_URL (never posted to Slack, not investigated); warnings stored before are skipped",
    )
    backtest.set_defaults(func=run)


def _on_the_scan_grid(when: datetime, interval: float) -> datetime:
    """`when` moved back to a multiple of the scan interval (unix time): a re-run over the same
    history scans at the same times, so it finds the same warnings (what `--store` skips)."""
    return datetime.fromtimestamp(when.timestamp() // interval * interval, UTC)


def _stored(settings: Settings, result: BacktestResult) -> Stored:
    """The backtest's warnings stored in one transaction: all of them, or none on an error."""
    from sqlalchemy.exc import OperationalError

    from rca.scan.service import policy_of
    from rca.scan.stored import store_all

    try:
        stored = store_all(settings.effective_database_url, result, policy_of(settings))
    except OperationalError as exc:
        fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); nothing was stored")
    return stored


def _minutes(seconds: float | None) -> str:
    return f"{seconds / 60:.1f} min" if seconds is not None else "n/a"


def _replayed(settings: Settings, args: argparse.Namespace, start: datetime, end: datetime) -> BacktestResult:
    """The backtest's result, or one line and exit 1 when Prometheus fails it. Prometheus is asked
    once first, so that one not there (or not Prometheus) is said at once, before the replay."""
    from rca.collect.prometheus import QUERY_ERRORS, short_error
    from rca.scan.backtest import backtest
    from rca.scan.scanner import prometheus_fleet_source

    source = prometheus_fleet_source(settings)
    try:
        source.instant("vector(1)", end)
        return backtest(settings, source, start, end, args.only)
    except QUERY_ERRORS as exc:
        fail(
            f"Prometheus at {settings.prometheus_url} is unavailable: {short_error(exc)} (check RCA_PROMETHEUS_URL)",
            code=EXIT_FAILED,
        )


def _no_targets(settings: Settings, args: argparse.Namespace, result: BacktestResult) -> str:
    """Why a replay saw no target, in a line."""
    from rca.collect.profile import profile_for

    span = (
        f"from {datetime.fromtimestamp(result.start, UTC):%Y-%m-%d %H:%M} "
        f"to {datetime.fromtimestamp(result.end, UTC):%Y-%m-%d %H:%M} UTC"
    )
    if args.only:
        return f"{args.only} is not a serving target of Prometheus at {settings.prometheus_url} {span}"
    serving = profile_for(settings.file_config()).scopes["serving"].probe.split("|")
    return (
        f"Prometheus at {settings.prometheus_url} has no serving target {span} "
        f"(no series of the profile's serving metrics, such as {serving[0]})"
    )


def run(settings: Settings, args: argparse.Namespace) -> None:
    if not settings.prometheus_url:
        fail("RCA_PROMETHEUS_URL: not set; the backtest replays the scan over Prometheus history")
    if args.store:
        prepare_database(settings)  # before the replay, which can take minutes
    report_logging()
    now = datetime.now(UTC)
    end = now - (args.until or timedelta(0))
    start = _on_the_scan_grid(now - args.since, settings.scan_interval_seconds)
    if start >= end:
        fail("--since: must reach further back than --until")
    result = _replayed(settings, args, start, end)
    summary = result.as_dict()
    if result.targets == 0:  # no data: nothing was judged, so nothing to store or score
        if args.json:
            print(json.dumps(summary, indent=2))
        print(f"no data: {_no_targets(settings, args, result)}", file=sys.stderr)
        raise SystemExit(EXIT_NO_DATA)
    stored = _stored(settings, result) if args.store else None
    if stored is not None:
        summary |= {"stored": len(stored.incident_ids), "already_stored": stored.already_stored}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    _print_report(result, summary, stored)


def _print_report(result: BacktestResult, summary: dict[str, object], stored: Stored | None) -> None:
    """The replay in lines: each breach and how far ahead it was warned, each false warning, the totals."""
    print(f"{result.scans} scans of {result.targets} targets, {summary['start']} to {summary['end']}")
    for verdict in result.breaches:
        when = datetime.fromtimestamp(verdict.breach_at, UTC)
        lead = f"warned {verdict.lead_seconds / 60:.1f} min ahead" if verdict.lead_seconds is not None else "MISSED"
        print(f"  breach {verdict.instance} at {when:%Y-%m-%d %H:%M} UTC: {lead}")
    for warning in result.false_warnings:
        when = datetime.fromtimestamp(warning.start, UTC)
        print(f"  false warning {warning.instance} at {when:%Y-%m-%d %H:%M} UTC: {warning.reason}")
    breaches = len(result.breaches)
    share = f" ({len(result.warned_before) / breaches:.0%})" if breaches else ""
    per_week = result.false_per_week
    print(
        f"breaches (TTFT p95 first beyond its SLO) {breaches}: warned before {len(result.warned_before)}{share}, "
        f"missed {len(result.missed)}; lead p50 {_minutes(result.lead_quantile(0.5))}, "
        f"p10 {_minutes(result.lead_quantile(0.1))}; warnings {len(result.warnings)}, "
        f"false warnings {len(result.false_warnings)}"
        + (f" ({per_week:.2f} per 7 target-days)" if per_week is not None else "")
    )
    if stored is not None:
        print(
            f"stored {len(stored.incident_ids)} warning(s) as incidents of origin backtest "
            f"({stored.already_stored} already stored); never posted to Slack"
        )
