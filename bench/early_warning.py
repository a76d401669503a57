"""Early-warning bench: how long before TTFT breaks its SLO the fleet scan warns, on a long
synthetic history in a real Prometheus, and how often it warns for nothing (issue 31's numbers).

    PATH=/path/to/prometheus/bin:$PATH .venv/bin/python bench/early_warning.py --seed 3

    .venv/bin/python bench/early_warning.py --seed 1 --data /tmp/ew-seed1   # keep the TSDB and the scans
    .venv/bin/python bench/early_warning.py --hosts 16 --days 2 --interval 30 --json

About 20 min on 2 cores with the defaults (simulation 6-8 min at 1 s steps, promtool 2-3 min,
the scan replayed 2,881 times 4-5 min). Seed 1 tuned the policy; seed 3 is held out
(docs/early_warning.md).

Writes the fleet of `bench/early_warning_fleet.py` (vLLM V1 engines as queueing models: diurnal
traffic, noise, deploy restarts, one busy-but-steady host, one hot host, brief bursts on the
healthy hosts, faults that develop over 10-30 min on half the hosts and sudden GPU throttles,
every day after the first) as OpenMetrics, backfills it with promtool and starts Prometheus on
it. Then it replays the scan over every day but the first (the first is the "same hour
yesterday" baseline) with `rca.scan.backtest` at `--interval`, and evaluates the SLA alerts over
the same history as Prometheus rules would, at a 30 s evaluation interval:

  raw     TTFT p95 over 5m > the SLO (RCA config's slo_ttft_seconds), its first evaluation: the
          breach itself, the yardstick
  for5m   the same condition held `for: 5m` (a typical SLA alert)
  llmd    TTFT p95 over 1h > the SLO held `for: 15m` (llm-d's style of SLO alert)

A fault is warned when the scan raised a warning on its host from 10 min before the fault began
until its end; its lead is the alert's time - the warning's, over every fault that alerted (one
warned late, or never, counts at its own lead: p10 and p50 over the good ones only would
flatter). Sudden faults (no early sign possible) are counted apart. A false warning is one on a
host outside every fault's span (from 10 min before it to 30 min after its recovery) with no SLO
breach of its own near it; their rate is given per 7 host-days of that healthy time, and on the
busy-but-steady host, the hot host and after a burst alone. Targets (issue 31): warned before
the raw breach for >= 95 % of the developing faults, median lead >= 5 min and >= 3 min for every
kind; <= 1 false warning per 7 host-days, none on the busy or the hot host.

The history ends at the last midnight UTC, so a seed draws the same fleet whenever it runs (it
ended an hour before the run until stop 40: the same seed was another world at every hour).

`--data DIR` keeps the TSDB, the fleet's facts and the scans in DIR; a later run with the same
seed, hosts, days and scan settings reuses them (the scans are the slow part), so policy changes
(states.py) can be measured in seconds on the same history; delete its scans-*.pickle after a
change to the scanner's code, which the cache's key does not see.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from early_warning_fleet import DAY, SUDDEN_KIND, Fault, make_fleet, simulate  # noqa: E402  (the synthetic fleet)

from rca.config import Settings  # noqa: E402
from rca.scan.backtest import Frame, lead_quantile, replay, scan_frames  # noqa: E402
from rca.scan.scanner import prometheus_fleet_source  # noqa: E402
from rca.scan.service import policy_of  # noqa: E402
from rca.scan.states import Policy  # noqa: E402
from tests.e2e import promstack  # noqa: E402

RULE_EVALUATION = 30  # seconds between rule evaluations
WARN_BEFORE_FAULT = 600.0  # a warning this long before a fault's start is still its warning
AFTER_FAULT = 1800.0  # a fault's span runs this long past its recovery (the queue drains, windows roll)
TTFT_BUCKETS = 'vllm:time_to_first_token_seconds_bucket{{instance!=""}}'
TTFT_P95 = f"histogram_quantile(0.95, sum by (instance, le) (rate({TTFT_BUCKETS}[{{window}}])))"
ALERTS = {"raw": ("5m", 0.0), "for5m": ("5m", 300.0), "llmd": ("1h", 900.0)}


def build(work: Path, seed: int, hosts: int, days: int, end: float) -> list[Fault]:
    """The fleet's history in work/tsdb and its facts in work/fleet.json; the faults."""
    rng = np.random.default_rng(seed)
    start = end - days * DAY
    fleet, faults = make_fleet(rng, hosts, start, days)
    source = work / "history.om"
    began = time.perf_counter()
    with source.open("w") as out:
        for n, host in enumerate(fleet):
            out.writelines(simulate(host, faults, start, end, np.random.default_rng([seed, n])))
        out.write("# EOF\n")
    simulated = time.perf_counter() - began
    promstack.blocks_from(source, work / "tsdb", timeout=3600)
    facts = {
        "seed": seed,
        "start": start,
        "end": end,
        "hosts": [h.name for h in fleet],
        "busy": [h.name for h in fleet if h.busy],
        "hot": [h.name for h in fleet if h.hot],
        "bursts": {h.name: h.bursts for h in fleet if h.bursts},
        "restarts": {h.name: h.restarts for h in fleet},
        "faults": [asdict(f) | {"host": fleet[f.host].name} for f in faults],
    }
    (work / "fleet.json").write_text(json.dumps(facts))
    print(
        f"history: {hosts} hosts x {days} days, {len(faults)} faults; simulated in {simulated:.0f} s, "
        f"backfilled in {time.perf_counter() - began - simulated:.0f} s",
        file=sys.stderr,
    )
    return faults


def firing(url: str, window: str, hold: float, slo: float, start: float, end: float) -> dict[str, list[float]]:
    """Each instance's alert firing times (rising edges) over [start, end], as a rule with
    `for: hold` evaluated every RULE_EVALUATION seconds would fire them."""
    promql = f"{TTFT_P95.format(window=window)} > {slo}"
    answer = httpx.post(
        f"{url}/api/v1/query_range",
        data={"query": promql, "start": start, "end": end, "step": RULE_EVALUATION},
        timeout=300,
    ).json()
    if answer.get("status") != "success":
        raise RuntimeError(f"{promql}: {answer}")
    fired: dict[str, list[float]] = {}
    for row in answer["data"]["result"]:
        instance = row["metric"]["instance"]
        pending, last, active = None, None, False
        for ts, _ in row["values"]:
            ts = float(ts)
            if last is None or ts - last > RULE_EVALUATION:  # a gap: the condition stopped holding
                pending, active = ts, False
            last = ts
            if not active and ts - pending >= hold:
                fired.setdefault(instance, []).append(ts)
                active = True
    return fired


def host_of(instance: str) -> str:
    return instance.rsplit(":", 1)[0]


def measure(facts: dict, frames: list[Frame], policy: Policy, alerts: dict[str, dict[str, list[float]]]) -> dict:
    """The issue's figures from the scans (replayed under `policy`) and the alerts: first against
    the raw breach (TTFT p95 over 5 m first past the SLO), then the SLA alerts' `for:`."""
    result = replay(frames, policy)
    warnings = [(host_of(w.instance), w.start, w.reason) for w in result.warnings]
    faults = facts["faults"]
    spans = {h: [] for h in facts["hosts"]}
    for f in faults:
        f_end = f["start"] + f["ramp"] + f["hold"] + 300.0
        f["end"] = f_end
        spans[f["host"]].append((f["start"] - WARN_BEFORE_FAULT, f_end + AFTER_FAULT))
    rows = []
    for f in faults:
        warned = [
            at for host, at, _ in warnings if host == f["host"] and f["start"] - WARN_BEFORE_FAULT <= at <= f["end"]
        ]
        row = {"host": f["host"], "kind": f["kind"], "start": f["start"], "ramp_min": f["ramp"] / 60}
        row["sudden"] = f["kind"] == SUDDEN_KIND
        row["warned_at"] = min(warned) if warned else None
        row["reason"] = next((r for host, at, r in warnings if host == f["host"] and at == row["warned_at"]), None)
        for name in ALERTS:
            fired = [
                at
                for instance, times in alerts[name].items()
                if host_of(instance) == f["host"]
                for at in times
                if f["start"] <= at <= f["end"] + AFTER_FAULT
            ]
            row[f"{name}_at"] = min(fired) if fired else None
        rows.append(row)
    begin, finish = frames[0].at, frames[-1].at
    healthy = 0.0
    for host in facts["hosts"]:
        covered = sum(min(b, finish) - max(a, begin) for a, b in spans[host] if b > begin and a < finish)
        healthy += finish - begin - covered
    outside = [(host, at, reason) for host, at, reason in warnings if not any(a <= at <= b for a, b in spans[host])]
    breached = {host_of(i): times for i, times in alerts["raw"].items()}  # the SLO itself broke: not a false warning
    false = [w for w in outside if not any(w[1] - 300 <= at <= w[1] + 900 for at in breached.get(w[0], []))]
    stray_alerts = {
        name: sum(
            1
            for instance, times in fired.items()
            for at in times
            if not any(a <= at <= b for a, b in spans[host_of(instance)])
        )
        for name, fired in alerts.items()
    }
    developing = [r for r in rows if not r["sudden"]]
    figures: dict = {"faults": len(developing), "sudden_faults": len(rows) - len(developing)}
    figures["healthy_host_days"] = healthy / DAY
    for name in ALERTS:
        figures[name] = _against(developing, name)
        figures[name]["alerts_outside_faults"] = stray_alerts[name]
    figures["raw_by_kind"] = {
        kind: _against([r for r in developing if r["kind"] == kind], "raw")
        for kind in sorted({r["kind"] for r in developing})
    }
    sudden = [r for r in rows if r["sudden"] and r["raw_at"] is not None]
    figures["sudden"] = {
        "alerted": len(sudden),
        "warned": sum(1 for r in sudden if r["warned_at"] is not None),
        "warned_before_raw": sum(1 for r in sudden if r["warned_at"] is not None and r["warned_at"] < r["raw_at"]),
        "median_delay_after_raw_s": _median([r["warned_at"] - r["raw_at"] for r in sudden if r["warned_at"]]),
        "reasons": [r["reason"] for r in sudden],
    }
    busy, hot, bursting = set(facts["busy"]), set(facts.get("hot", [])), facts.get("bursts", {})
    figures["warnings_outside_faults"] = len(outside)
    figures["false_warnings"] = len(false)
    figures["false_per_7_host_days"] = len(false) / (healthy / DAY) * 7 if healthy else None
    figures["false_on_busy_host"] = sum(1 for host, _, _ in false if host in busy)
    figures["false_on_hot_host"] = sum(1 for host, _, _ in false if host in hot)
    figures["false_in_bursts"] = sum(
        1 for host, at, _ in false if any(b <= at <= b + s + 600 for b, s, _ in bursting.get(host, []))
    )
    figures["false_warning_list"] = [f"{h} at {_clock(at)}: {reason}" for h, at, reason in false]
    figures["never_warned"] = sum(1 for r in developing if r["warned_at"] is None)
    figures["rows"] = rows
    return figures


def _against(rows: list[dict], alert: str) -> dict:
    """How far ahead of `alert` these faults were warned: the share warned before it, and the
    lead's p50 and p10 over every fault that alerted (a fault warned after it, or never, counts
    with its lead, negative or minus infinity: a percentile over only the good ones flatters)."""
    alerted = [r for r in rows if r[f"{alert}_at"] is not None]
    leads = [(r[f"{alert}_at"] - r["warned_at"]) if r["warned_at"] is not None else None for r in alerted]
    ahead = [r for r in alerted if r["warned_at"] is not None and r["warned_at"] < r[f"{alert}_at"]]
    return {
        "faults_alerted": len(alerted),
        "warned_before": len(ahead),
        "share_warned_before": len(ahead) / len(alerted) if alerted else None,
        "lead_p50_min": _quantile_min(leads, 0.5),
        "lead_p10_min": _quantile_min(leads, 0.1),
        "missed": [f"{r['host']} {r['kind']} at {_clock(r['start'])}" for r in alerted if r not in ahead],
    }


def _quantile_min(leads: list[float | None], q: float) -> float | None:
    """`lead_quantile` (a fault never warned at minus infinity) in minutes."""
    value = lead_quantile(leads, q)
    return value / 60 if value is not None else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%d %H:%M")


def _minutes(value: float | None) -> str:
    return f"{value:.1f} min" if value is not None else "n/a"


def _print(figures: dict, runtime: dict) -> None:
    print(
        f"backtest: {runtime['scans']} scans of {runtime['targets']} targets in {runtime['seconds']:.0f} s "
        f"({runtime['seconds'] / max(runtime['scans'], 1) * 1000:.0f} ms a scan, interval {runtime['interval']:.0f} s)"
    )
    print(
        f"developing faults: {figures['faults']}; healthy host-days: {figures['healthy_host_days']:.1f}; "
        f"never warned: {figures['never_warned']}"
    )
    for name, label in (
        ("raw", "the raw SLO breach (TTFT p95 over 5m first past the SLO)"),
        ("for5m", "an SLA alert with for: 5m"),
        ("llmd", "a 1h-window SLO alert with for: 15m"),
    ):
        f = figures[name]
        share = f"{f['share_warned_before'] * 100:.0f} %" if f["share_warned_before"] is not None else "n/a"
        print(
            f"  vs {label}: {f['faults_alerted']} faults alerted, warned before {f['warned_before']} ({share}), "
            f"lead p50 {_minutes(f['lead_p50_min'])}, p10 {_minutes(f['lead_p10_min'])}, "
            f"alerts outside faults {f['alerts_outside_faults']}"
        )
        if name == "raw":
            for kind, k in figures["raw_by_kind"].items():
                print(
                    f"      {kind}: warned before {k['warned_before']}/{k['faults_alerted']}, "
                    f"lead p50 {_minutes(k['lead_p50_min'])}, p10 {_minutes(k['lead_p10_min'])}"
                )
            for missed in f["missed"]:
                print(f"      not before the breach: {missed}")
    s = figures["sudden"]
    delay = f"{s['median_delay_after_raw_s']:.0f} s" if s["median_delay_after_raw_s"] is not None else "n/a"
    print(
        f"sudden faults (no early sign; counted apart): {s['alerted']} alerted, warned {s['warned']} "
        f"({s['warned_before_raw']} before the raw breach), median {delay} after it"
    )
    print(
        f"warnings outside faults: {figures['warnings_outside_faults']} (on an SLO breach of their own: "
        f"{figures['warnings_outside_faults'] - figures['false_warnings']}); "
        f"false warnings: {figures['false_warnings']} ({figures['false_per_7_host_days']:.2f} per 7 host-days), "
        f"on the busy-but-steady host: {figures['false_on_busy_host']}, on the hot host: "
        f"{figures['false_on_hot_host']}, after a brief burst: {figures['false_in_bursts']}"
    )
    for line in figures["false_warning_list"]:
        print(f"      false: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=3, help="history seed (1 was the tuning seed, 3 held out)")
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--days", type=int, default=2, help="days of history; the first is the baseline's")
    parser.add_argument("--interval", type=float, default=30.0, help="scan interval of the backtest, seconds")
    parser.add_argument("--data", type=Path, help="keep (and reuse) the TSDB and the scans here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.days < 2:
        raise SystemExit("--days: at least 2 (the first day is the baseline's history)")
    if not (promstack.PROMETHEUS and promstack.PROMTOOL):
        raise SystemExit("prometheus and promtool are needed: apt-get install -y prometheus")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.data or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        key = f"{args.seed}-{args.hosts}-{args.days}"
        if (work / "fleet.json").exists() and (work / "key").read_text() == key:
            facts = json.loads((work / "fleet.json").read_text())
        else:
            # The history ends at the last midnight (UTC): the fleet's days and faults follow the
            # clock's hour, so a history that ended at the hour the bench ran drew another world
            # for the same seed at every hour of the day.
            end = time.time() // DAY * DAY
            stale = [*work.glob("scans-*.pickle"), *work.glob("alerts-*.json")]
            subprocess.run(["rm", "-rf", str(work / "tsdb"), *map(str, stale)], check=True)
            build(work, args.seed, args.hosts, args.days, end)
            (work / "key").write_text(key)
            facts = json.loads((work / "fleet.json").read_text())
        proc, url = promstack.start_prometheus(work, promstack.free_port(), None)
        try:
            settings = Settings(prometheus_url=url, prometheus_timeout_seconds=300, scan_interval_seconds=args.interval)
            slo = settings.file_config().slo_ttft_seconds
            begin, finish = facts["start"] + DAY, facts["end"]
            scan_key = hashlib.sha256(settings.model_dump_json(include=_SCAN_FIELDS).encode()).hexdigest()[:16]
            cache = work / f"scans-{scan_key}.pickle"
            runtime: dict
            if cache.exists():
                frames, runtime = pickle.loads(cache.read_bytes())
            else:
                began = time.perf_counter()
                source = prometheus_fleet_source(settings)
                total = int((finish - begin) // args.interval) + 1

                def progress(done: int) -> None:
                    if done % 240 == 0:
                        spent = time.perf_counter() - began
                        print(f"  {done}/{total} scans, {spent:.0f} s", file=sys.stderr, flush=True)

                frames = scan_frames(settings, source, _utc(begin), _utc(finish), progress)
                runtime = {
                    "scans": len(frames),
                    "targets": len({i for f in frames for i in f.assessments}),
                    "seconds": time.perf_counter() - began,
                    "interval": args.interval,
                }
                if args.data:
                    cache.write_bytes(pickle.dumps((frames, runtime)))
            alerts_file = work / f"alerts-{slo:g}.json"
            if alerts_file.exists():
                alerts = json.loads(alerts_file.read_text())
            else:
                alerts = {
                    name: firing(url, window, hold, slo, begin, finish) for name, (window, hold) in ALERTS.items()
                }
                alerts_file.write_text(json.dumps(alerts))
        finally:
            proc.stop()
    figures = measure(facts, frames, policy_of(settings), alerts)
    if args.json:
        print(json.dumps({"runtime": runtime, "figures": figures}, indent=2, default=str))
    else:
        _print(figures, runtime)


_SCAN_FIELDS = {
    "scan_interval_seconds",
    "scan_history_minutes",
    "scan_trend_minutes",
    "scan_horizon_minutes",
    "scan_saturation_trend_minutes",
    "scan_saturation_horizon_minutes",
}


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


if __name__ == "__main__":
    main()
