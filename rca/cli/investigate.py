"""`rca investigate`: one investigation now, without the service, printed (nothing stored)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from rca.cli.common import EXIT_NO_DATA, Command, fail
from rca.cli.logs import report_logging
from rca.config import Settings, first_error
from rca.domain.status import AlertStatus


def add_parser(command: Command) -> None:
    inv = command(
        "investigate",
        "run one investigation now and print the ranked result",
        "Investigate one alert now, without the service: collect the window from RCA_PROMETHEUS_URL, "
        "judge the signals, rank the causes and print them (nothing is stored). Exits 3 when "
        "nothing could be measured.",
    )
    inv.add_argument("payload", nargs="?", help="Alertmanager webhook payload (JSON file)")
    inv.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="alert label, repeatable (instead of a payload)",
    )
    inv.add_argument(
        "--start",
        metavar="TIME",
        help="alert start with --label, ISO 8601 such as 2026-12-03T08:40:00Z; UTC unless an "
        "offset is given (default: now)",
    )
    inv.add_argument("--json", action="store_true", help="machine-readable output")
    inv.set_defaults(func=run)


def _alerts_from_args(args: argparse.Namespace) -> tuple[list[dict[str, str]], list[datetime]]:
    from rca.intake.schema import WebhookPayload

    if args.payload and args.label:
        fail(
            f"--label: not with a payload file ({args.payload}), whose alerts carry their labels; give one or the other"
        )
    if args.payload and args.start:
        fail(f"--start: not with a payload file ({args.payload}), whose alerts carry their start; use it with --label")
    if args.payload:
        try:
            payload = WebhookPayload.model_validate_json(Path(args.payload).read_bytes())
        except OSError as exc:
            fail(f"{args.payload}: {exc.strerror}")
        except ValidationError as exc:
            fail(f"{args.payload}: not an Alertmanager payload: {first_error(exc)}")
        firing = [a for a in payload.alerts if a.status == AlertStatus.FIRING] or payload.alerts
        return [a.labels for a in firing], [a.startsAt for a in firing]
    labels = {}
    for item in args.label:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"--label {item!r}: expected name=value")
        labels[name] = value
    if not labels:
        fail("give an Alertmanager payload file or at least one --label name=value")
    return [labels], [parse_start(args.start) if args.start else datetime.now(UTC)]


def parse_start(text: str) -> datetime:
    """An ISO 8601 time (UTC when it names no offset); a one-line usage error otherwise."""
    try:
        start = datetime.fromisoformat(text.strip())
    except ValueError:
        fail(
            f"--start {text!r}: expected an ISO 8601 time such as 2026-12-03T08:40:00Z "
            "or 2026-12-03 08:40 (UTC unless an offset is given)"
        )
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def run(settings: Settings, args: argparse.Namespace) -> None:
    from rca.analyst.summary import AlertText
    from rca.collect.target import target_from_alerts
    from rca.domain.coverage import data_gap
    from rca.pipeline import analyse
    from rca.report import no_data_reason, render, use_colour, written_by

    report_logging()
    labels, starts = _alerts_from_args(args)
    target = target_from_alerts(labels, starts, settings.file_config().target)
    alerts = [AlertText(alert, {}, start) for alert, start in zip(labels, starts, strict=True)]
    analysis = analyse(settings, target, alerts=alerts)
    findings = [f.to_dict() | {"id": f.key} for f in analysis.findings]
    hypotheses = [h.to_dict() for h in analysis.hypotheses]
    record = analysis.analyst
    no_data = no_data_reason(findings, analysis.collection.prometheus_error)
    gap = data_gap(analysis.findings, analysis.collection.prometheus_error)
    if args.json:  # the same document with or without data; the exit code says which
        window = analysis.collection.window
        out = {
            "target": target.to_dict(),
            "selectors": analysis.collection.selectors,
            "window": {
                "start": window.start.isoformat(),
                "end": window.end.isoformat(),
                "step_seconds": window.step_seconds,
            },
            "collect_seconds": round(analysis.collect_seconds, 3),
            "findings": findings,
            "hypotheses": hypotheses,
            "analyst": record.to_dict() if record else None,
            "written_by": written_by(record.analyst, record.model, record.fallback_reason) if record else None,
            "error": analysis.collection.prometheus_error,
            "data_gap": gap.text if gap else None,  # what was not measured: not a healthy verdict
            "inconclusive_reason": gap.reason if gap else None,  # set when nothing was: no cause ranked
        }
        print(json.dumps(out, indent=2, default=str))
    elif no_data is None:
        print(render(target.describe(), findings, hypotheses, colour=use_colour(sys.stdout)))
        if record is not None:
            print("\n" + written_by(record.analyst, record.model, record.fallback_reason))
    if no_data is not None:
        _no_data(target.describe(), no_data, settings.prometheus_url)


def _no_data(subject: str, reason: str, prometheus_url: str | None) -> None:
    """ "No data" is its own answer: one line saying why, and exit code 3 (never a confidence)."""
    from rca.report import no_data_hint

    hint = no_data_hint(reason, prometheus_url)
    print(f"no data for {subject}: {reason}" + (f" ({hint})" if hint else ""), file=sys.stderr)
    raise SystemExit(EXIT_NO_DATA)
