"""`rca investigate-again`: queue a new investigation of a stored incident now."""

from __future__ import annotations

import argparse

from rca.cli.checks import prepare_database
from rca.cli.common import EXIT_FAILED, Command, fail
from rca.config import Settings


def add_parser(command: Command) -> None:
    again = command(
        "investigate-again",
        "queue a new investigation of a stored incident now",
        "Investigate a stored incident again now, firing or resolved (after fixing RCA_PROMETHEUS_URL, "
        "say), beside its earlier investigations: on RCA_BROKER_URL's queue, or, without a broker, for "
        "the running `rca serve` to start. One already queued or running is named instead. Exits 1 "
        "when there is no such incident.",
    )
    again.add_argument("incident_id", type=int, metavar="INCIDENT_ID", help="the incident's id, as the API shows it")
    again.add_argument(
        "--by", default="cli", metavar="NAME", help="who asks, recorded as the investigation's requested_by"
    )
    again.set_defaults(func=run)


def run(settings: Settings, args: argparse.Namespace) -> None:
    """Queue a new investigation of a stored incident now, as `POST /api/v1/incidents/{id}/investigations`
    does: on RCA_BROKER_URL's queue, or, without a broker, for the running `rca serve` to sweep."""
    from rca.incidents.queue import investigate_again
    from rca.intake.service import fleet_of
    from rca.jobs.dispatch import CeleryDispatcher, enqueue_all
    from rca.store.db import session_scope

    if not 1 <= args.incident_id <= 2**31 - 1:
        fail(f"INCIDENT_ID: {args.incident_id} is not an incident id (1 to {2**31 - 1})")
    by = args.by.strip()
    if not by or len(by) > 128:
        fail("--by: give 1 to 128 characters")
    prepare_database(settings)
    with session_scope(settings.effective_database_url) as session:
        requested = investigate_again(session, args.incident_id, requested_by=by, fleet=fleet_of(settings))
    if requested is None:
        fail(f"no incident {args.incident_id}", code=EXIT_FAILED)
    hosts = f" and {len(requested.ids) - 1} more, one per host," if len(requested.ids) > 1 else ""
    which = f"investigation {requested.investigation_id}{hosts} of incident {args.incident_id}"
    if not requested.ids:
        print(f"{which} is already {requested.status}; no other queued")
        return
    if settings.embedded_queue:
        soon = settings.sweep_after_seconds + settings.sweep_interval_seconds
        print(f"{which} queued; the running `rca serve` starts it within about {soon:.0f} s (its sweep)")
        return
    dispatcher = CeleryDispatcher(settings)
    try:
        enqueued = enqueue_all(dispatcher, requested.ids)
    finally:
        dispatcher.close()
    where = "sent to RCA_BROKER_URL" if enqueued else "the broker refused it; the sweeper enqueues it"
    print(f"{which} queued ({where})")
