"""Fit the ranking's calibration on tuning seeds of the generated worlds and write it into the
`calibration:` section of rca/diagnosis/taxonomy.yaml (the one place it comes from).

    .venv/bin/python tools/fit_calibration.py --count 3000 [--jobs 2]

Each tuning world goes through the real pipeline (tests/worlds/fast.py) and the raw ranking
(`rank(..., calibrated=False)`). The cause map is fitted on the first cause of every world that has
a candidate (right when it is the world's cause); the `no_clear_cause` map on the worlds with no
candidate (right when the world is a healthy control), as `rank` applies them. Only tuning seeds
are read: the held-out seeds stay unseen (docs/diagnosis.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.config import load_settings  # noqa: E402
from rca.diagnosis.calibration import Calibration, fit  # noqa: E402
from rca.diagnosis.ranking import NO_CLEAR_CAUSE, TAXONOMY_FILE, rank  # noqa: E402
from tests.worlds.fast import diagnose  # noqa: E402
from tests.worlds.generate import TUNING_SEEDS, draw  # noqa: E402

NOW = 1_780_000_000.0  # the benchmark's reference time
MARKER = "# Calibration: written by tools/fit_calibration.py"


def _raw_top(seed: int) -> tuple[str, float, bool]:
    """(kind, raw confidence, right) of one tuning world's raw top answer."""
    with tempfile.TemporaryDirectory() as tmp:
        world = draw(seed, NOW)
        findings = diagnose(world, load_settings(data_dir=Path(tmp))).findings
    ranked = rank(findings, calibrated=False)
    causes = [h for h in ranked if h.category != NO_CLEAR_CAUSE]
    if causes:  # the cause the calibrated ranking puts first
        return "cause", causes[0].confidence, causes[0].category == world.cause
    return "no_cause", ranked[0].confidence, world.cause == NO_CLEAR_CAUSE


def render(calibration: Calibration) -> str:
    """The section as YAML text, one knot list per line so a change reads as a small diff."""

    def curve(name: str) -> list[str]:
        c = getattr(calibration, name)
        return [f"  {name}:", f"    raw: {c.raw}", f"    right: {c.right}"]

    lines = [
        MARKER + " (isotonic regression of right answers on the",
        "# raw strength, on tuning seeds only); rca/diagnosis/calibration.py says how it is used. Do not edit.",
        "calibration:",
        f'  fitted_on: "{calibration.fitted_on}"',
        *curve("cause"),
        *curve("no_cause"),
    ]
    return "\n".join(lines) + "\n"


def write(calibration: Calibration, path: Path = TAXONOMY_FILE) -> None:
    text = path.read_text()
    kept = text.split(MARKER, 1)[0].rstrip("\n")
    path.write_text(kept + "\n\n" + render(calibration))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="tuning worlds to fit on")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args()
    seeds = range(TUNING_SEEDS.start, TUNING_SEEDS.start + args.count)
    with Pool(args.jobs) as pool:
        tops = pool.map(_raw_top, seeds, chunksize=25)
    causes = [(raw, right) for kind, raw, right in tops if kind == "cause"]
    no_cause = [(raw, right) for kind, raw, right in tops if kind == "no_cause"]
    calibration = Calibration(
        cause=fit(causes),
        no_cause=fit(no_cause),
        fitted_on=f"tuning seeds {seeds.start}-{seeds.stop - 1}: {len(causes)} top causes, {len(no_cause)} without one",
    )
    write(calibration)
    print(render(calibration), end="")


if __name__ == "__main__":
    main()
