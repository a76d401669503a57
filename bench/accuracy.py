"""Accuracy benchmark: the labelled scenario suite through the real pipeline on real Prometheus.

    .venv/bin/python bench/accuracy.py
    .venv/bin/python bench/accuracy.py --severity 0.6 --ramp 600 --onset-minutes 60   # milder, slower faults

Prints AC@1, AC@3, Avg@5 (as RCAEval defines them), per-category results and the false-alarm rate
on healthy windows. Published anchors: BARO on RCAEval RE2 AC@1 0.69 / AC@3 0.82; RCACopilot
micro-F1 0.766. The suite is this project's own (tests/e2e/suite.py), so treat the figures as a
regression floor, not as a claim about unseen incidents.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.scenarios import RAMP_SECONDS  # noqa: E402
from tests.e2e.suite import CONFIDENT, ONSET_MINUTES_AGO, run_suite, score, suite_prometheus  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--severity", type=float, default=1.0, help="share of each fault's change that is reached (default 1.0)"
    )
    parser.add_argument("--ramp", type=float, default=RAMP_SECONDS, help="seconds from onset to full effect")
    parser.add_argument(
        "--onset-minutes",
        type=float,
        default=ONSET_MINUTES_AGO,
        help="minutes between the faults' onset and the investigation",
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        suite_prometheus(Path(tmp), args.onset_minutes, args.severity, args.ramp) as (url, suite),
    ):
        outcomes = run_suite(url, suite)
    print(f"{'scenario':34s} {'stack':8s} {'expected':24s} {'top answer (confidence)':36s} rank")
    for o in outcomes:
        top = o.ranked[0]
        rank = o.categories.index(o.scenario.expected) + 1 if o.scenario.expected in o.categories else "-"
        print(
            f"{o.scenario.name:34s} {o.stack or '-':8s} {o.scenario.expected:24s} "
            f"{top.category + f' ({top.confidence:.2f})':36s} {rank}"
        )
    per_category: dict[str, list[bool]] = defaultdict(list)
    for o in outcomes:
        per_category[o.scenario.expected].append(o.hit_at(1))
    print("\nper category (AC@1):")
    for category, hits in sorted(per_category.items()):
        print(f"  {category:24s} {sum(hits)}/{len(hits)}")
    result = score(outcomes)
    seconds = sorted(o.seconds for o in outcomes)
    print(
        f"\nscenarios {len(outcomes)}  AC@1 {result['AC@1']:.2f}  AC@3 {result['AC@3']:.2f}  "
        f"Avg@5 {result['Avg@5']:.2f}"
    )
    print(
        f"false-alarm rate on healthy windows {result['false_alarm_rate']:.2f}; confident (>= {CONFIDENT}) wrong "
        f"top answers: {result['confident_wrong']} (on healthy controls: {result['healthy_confident_wrong']})"
    )
    right = [o.ranked[0].confidence for o in outcomes if o.hit_at(1)]
    wrong = [o.ranked[0].confidence for o in outcomes if not o.hit_at(1)]
    brier = sum((o.ranked[0].confidence - o.hit_at(1)) ** 2 for o in outcomes) / len(outcomes)
    print(
        f"calibration of the top answer: Brier score {brier:.3f}; mean confidence when right "
        f"{sum(right) / max(1, len(right)):.2f} ({len(right)}), when wrong "
        f"{sum(wrong) / max(1, len(wrong)):.2f} ({len(wrong)})"
    )
    print(f"analysis time per scenario: median {seconds[len(seconds) // 2]:.3f} s, max {seconds[-1]:.3f} s")
    print("anchors: BARO RCAEval RE2 AC@1 0.69 / AC@3 0.82; RCACopilot micro-F1 0.766")


if __name__ == "__main__":
    main()
