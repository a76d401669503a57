"""Diagnosis benchmark on generated worlds: thousands of hosts with a known cause (or none), each
through the real pipeline (scopes, stack detection, fallbacks, findings, SLO model, ranking) with
Prometheus' answers computed from the world (tests/worlds/fast.py).

    .venv/bin/python bench/diagnosis_worlds.py --seeds tuning --count 2000
    .venv/bin/python bench/diagnosis_worlds.py --seeds held-out --count 2000 --json
    .venv/bin/python bench/diagnosis_worlds.py --seeds 1000000:1002000 --drop-support

`tuning` seeds (tests.worlds.generate.TUNING_SEEDS) are the ones to look at while changing the
taxonomy, the profile or the engine model; `held-out` seeds are only ever reported. `--drop-support`
runs every fault world twice, the second time with one series behind one of the true cause's
measured supporting findings dropped, as one keep-list line drops it (one metric: a histogram's
`_bucket`, `_sum` and `_count` together; of a query that joins or divides several, one of them),
and reports the fall in AC@1: over all of them, where another series of the host measured the
finding instead (a fallback answered), and where the host had no other source for it (the evidence
is gone: the answer should then not be a confident wrong one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.config import Settings, load_settings  # noqa: E402
from rca.diagnosis.ranking import taxonomy  # noqa: E402
from rca.domain.status import MEASURED  # noqa: E402
from tests.e2e.scenarios import metric_family  # noqa: E402
from tests.worlds.fast import METRIC_NAME, diagnose  # noqa: E402
from tests.worlds.generate import HEALTHY, HELD_OUT_SEEDS, TUNING_SEEDS, World, draw  # noqa: E402
from tests.worlds.report import Outcome, accuracy, summarise  # noqa: E402

NOW = 1_780_000_000.0  # any fixed time: worlds are drawn relative to it


def seeds(spec: str, count: int) -> range:
    if spec == "tuning":
        return range(TUNING_SEEDS.start, TUNING_SEEDS.start + count)
    if spec == "held-out":
        return range(HELD_OUT_SEEDS.start, HELD_OUT_SEEDS.start + count)
    start, _, stop = spec.partition(":")
    return range(int(start), int(stop))


def without_one_support(world: World, outcome: Outcome) -> World | None:
    """The world again, with one series (a metric family) behind one measured supporting finding of
    its cause dropped: of a query that names several (a join, a ratio), one of them, as one keep-list
    line drops it."""
    cat = taxonomy()[world.cause]
    measured = [
        f
        for f in outcome.findings
        if f.key in cat.supports and f.status in MEASURED and METRIC_NAME.search(f.query or "")
    ]
    if not measured:
        return None
    pick = random.Random(world.seed)
    chosen = pick.choice(sorted(measured, key=lambda f: f.key))
    named = METRIC_NAME.findall(chosen.query or "")
    family = pick.choice(sorted({metric_family(n) for n in named}))  # a histogram's parts go together
    host = replace(world.host, dropped=world.host.dropped | {family})
    return replace(world, host=host, notes=[*world.notes, f"dropped {chosen.key} ({family})"])


_SETTINGS: list[Settings] = []  # one per worker process


def _settings() -> Settings:
    if not _SETTINGS:
        _SETTINGS.append(load_settings(data_dir=Path(tempfile.mkdtemp(prefix="rca-bench-"))))
    return _SETTINGS[0]


def _light(world: World) -> World:
    """The world without its engine timelines, which the report does not read (they are most of
    its size, and outcomes travel between processes)."""
    return replace(world, host=replace(world.host, faulty=None, healthy=None))


def _run(seed: int, drop_support: bool) -> tuple[Outcome, Outcome | None]:
    """One world's outcome and, with `drop_support` and a fault, its outcome with one support's series dropped."""
    world = draw(seed, NOW)
    analysis = diagnose(world, _settings())
    outcome = Outcome(world, analysis.hypotheses, analysis.findings)
    reduced = without_one_support(world, outcome) if drop_support and world.cause != HEALTHY else None
    if reduced is None:
        return replace(outcome, world=_light(world)), None
    again = diagnose(reduced, _settings())
    dropped = Outcome(_light(reduced), again.hypotheses, [f for f in again.findings if f.key == _dropped_key(reduced)])
    return replace(outcome, world=_light(world)), dropped


def _dropped_key(world: World) -> str:
    return next(n for n in world.notes if n.startswith("dropped ")).split()[1]


def _covered(reduced: Outcome) -> bool:
    """Another series of the host measured the dropped finding (a fallback answered)."""
    return any(f.status in MEASURED for f in reduced.findings)


def _by_dropped(pairs: list[tuple[Outcome, Outcome]]) -> dict[str, list[tuple[Outcome, Outcome]]]:
    """The pairs grouped by the finding whose series was dropped."""
    groups: dict[str, list[tuple[Outcome, Outcome]]] = {}
    for pair in pairs:
        groups.setdefault(_dropped_key(pair[1].world), []).append(pair)
    return groups


def _drop_row(pairs: list[tuple[Outcome, Outcome]]) -> dict[str, float]:
    reduced = [b for _, b in pairs]
    return {
        "n": len(pairs),
        "AC@1": accuracy([a for a, _ in pairs])["AC@1"],
        "AC@1_dropped": accuracy(reduced)["AC@1"],
        "confident_wrong_dropped": sum(o.confident_wrong for o in reduced) / max(1, len(reduced)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="tuning", help="tuning, held-out, or START:STOP")
    parser.add_argument("--count", type=int, default=1000, help="worlds to draw (tuning and held-out)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument("--drop-support", action="store_true", help="also run each fault without one support")
    parser.add_argument("--misses", type=int, default=0, help="print this many misses with their findings")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args()
    started = time.perf_counter()
    with Pool(args.jobs) as pool:
        runs = pool.map(partial(_run, drop_support=args.drop_support), seeds(args.seeds, args.count), chunksize=10)
    outcomes = [outcome for outcome, _ in runs]
    report = summarise(outcomes)
    report["seconds_per_world"] = (time.perf_counter() - started) * args.jobs / max(1, len(runs))
    if args.drop_support:
        pairs = [(outcome, reduced) for outcome, reduced in runs if reduced is not None]
        report["drop_one_support"] = _drop_row(pairs) | {
            "another_source": _drop_row([pair for pair in pairs if _covered(pair[1])]),
            "no_other_source": _drop_row([pair for pair in pairs if not _covered(pair[1])]),
            "by_finding": {key: _drop_row(members) for key, members in sorted(_by_dropped(pairs).items())},
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_report(report)
    for outcome in [o for o in outcomes if not o.hit_at(1)][: args.misses]:
        breached = sorted(f.key for f in outcome.findings if f.breached)
        print(
            f"  {outcome.world.seed}: {outcome.world.cause} -> {outcome.top.category} {outcome.top.confidence:.2f}"
            f" | {' '.join(breached)} | {'; '.join(outcome.world.notes)}"
        )


def print_report(r: dict) -> None:
    print(f"worlds {r['all']['n']} ({r['seconds_per_world'] * 1000:.0f} ms each)")
    f = r["faults"]
    print(f"faults: AC@1 {f['AC@1']:.3f}  AC@3 {f['AC@3']:.3f}  Avg@5 {f['Avg@5']:.3f}  (n={f['n']})")
    print(f"confident wrong {r['confident_wrong']:.3%}  ECE {r['ece']:.3f}")
    h = r["healthy"]
    print(
        f"healthy (n={h['n']}): top no_clear_cause {h['top_is_no_clear_cause']:.3f}, "
        f"no cause a candidate {h['no_cause_is_a_candidate']:.3f}"
    )
    if "drop_one_support" in r:
        d = r["drop_one_support"]
        for title, row in (
            ("one support dropped", d),
            ("  another source answered", d["another_source"]),
            ("  no other source on the host", d["no_other_source"]),
            *((f"  {key}", row) for key, row in d["by_finding"].items()),
        ):
            print(
                f"{title:32s} AC@1 {row['AC@1']:.3f} -> {row['AC@1_dropped']:.3f}"
                f"  confident wrong {row['confident_wrong_dropped']:.1%}  n={row['n']}"
            )
    for title in ("per_cause", "per_stack", "by_severity", "by_minutes_since_onset", "by_missing_data"):
        print(f"{title}:")
        for name, a in r[title].items():
            wrong = f"  confident wrong {a['confident_wrong']:.1%}" if "confident_wrong" in a else ""
            print(f"  {name:24s} AC@1 {a['AC@1']:.3f}  AC@3 {a['AC@3']:.3f}  n={a['n']}{wrong}")
    print("reliability (confidence said -> share right):")
    for row in r["reliability"]:
        print(f"  {row['from']:.1f}-{row['to']:.1f}  n={row['n']:5d}  said {row['said']:.2f}  right {row['right']:.2f}")
    print("confusion (true -> top answers):")
    for cause, row in r["confusion"].items():
        cells = ", ".join(f"{k} {v}" for k, v in sorted(row.items(), key=lambda kv: -kv[1]))
        print(f"  {cause:24s} {cells}")


if __name__ == "__main__":
    main()
