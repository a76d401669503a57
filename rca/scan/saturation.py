"""When each engine runs out of room: its utilisation now, its trend, and the probability that
it is full within the horizon.

An engine admits every request while it has a sequence slot and KV blocks for it, so a surge, longer
prompts, more prefill or a slower step first fill its batch; requests wait only once it is full,
and TTFT follows within a minute or two. So the batch's headroom, not the queue, is what moves
minutes ahead of the breach. Utilisation is the fuller of the two rooms:

- the KV cache's used share (the engine exports it; full at 1);
- the running requests against the batch ceiling, which no engine exports (vLLM's
  --max-num-seqs and its peers): the scan learns it as the batch size the engine held while
  others waited with its KV cache not nearly full (a queue while KV is full says nothing of the
  slots), a plateau seen at least MIN_SIGHTINGS times and never exceeded (`slot_ceiling`); without
  one of its own, the highest such ceiling among the same job's engines of the same stack.

A Theil-Sen line over the last `trend_seconds` gives the utilisation now (the line's value, not
a lagging median) and its slope with a 90 % interval; P(full within the horizon) is the chance,
under that interval read as a normal spread, that the slope is at least what would fill the room
in time, and it must hold over LONG_WINDOWS times that window too, as the SRE workbook's
multi-window burn-rate alerts pair a short window with a long one: the short says the batch is
filling now, the long that it has been filling long enough not to be a burst the engine absorbs
(a burst of a minute or three fills the short window's line, hardly the long one's). Its own
normal level (the history before the trend window) tells a host that always runs full (a batch
workload) from one that is filling up.

A straight line forecasts only while the series still lies on it: once the latest sample falls
below the line, and below where the series stood in the minutes before it, by more than the
gauge's own jitter from one sample to the next (`Headroom.turned`), the rise has stopped (a burst
ending, a hot engine's KV swinging back from its peak) and the line's "full in ~N min" is about a
past that no longer holds. A fill that goes on keeps its latest samples on or above the line (a
surge, as the step slows with the batch, accelerates), or, as it nears full and slows, at least
as high as it stood: a KV share that creeps from 0.84 to 0.85 lies under a line drawn through its
steeper start, but it has not turned. The jitter, not the residuals about the line, is the
yardstick: a burst's curve inflates those, and the level's wander over the hour (a hot engine's
KV share swings by half within minutes) says nothing of how far one sample strays.
"""

from __future__ import annotations

import itertools
import math
import statistics
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist

from rca.collect.prometheus import Samples
from rca.scan.fleet import ServingInstance, SignalSeries, sample_time
from rca.scan.forecast import MIN_TREND_POINTS, TREND_CONFIDENCE, normal_range
from rca.scan.trend import Trend, theil_sen
from rca.signals.findings import MAD_TO_SIGMA

FULL_LEVEL = 0.97  # the utilisation at which requests start to wait: admission stops short of the last block
KV_BOUND = 0.9  # a queue while the KV cache is this full is KV-bound: its batch size is no slot ceiling
MIN_SIGHTINGS = 3  # steps with a queue at the ceiling before it counts as the engine's ceiling
CEILING_SLACK = 1.02  # a ceiling the engine ran more than 2 % above is no ceiling
LONG_WINDOWS = 2  # the long window is this many trend windows
PLATEAU = 0.98  # a step with a queue is at the ceiling when its batch is within 2 % of it
# The latest sample below the short trend line, and below the highest it stood in the
# TURN_LOOKBACK_SECONDS before, by more than this many of the gauge's jitter (its step-to-step
# changes over the hour, as a standard deviation of one sample) is a turn, not a fill; and by at
# least TURN_FLOOR of the room, so that a gauge that never wavered does not turn on any dip.
TURN_SIGMAS = 2.0
TURN_FLOOR = 0.01
TURN_LOOKBACK_SECONDS = 120  # a fall is from the highest it stood in these seconds before the latest
_NORMAL = NormalDist()  # the stdlib's: scipy's per-call overhead is 30 times its, every instance every scan
_Z = _NORMAL.inv_cdf(0.5 + TREND_CONFIDENCE / 2)  # half-width of the trend interval in standard deviations


@dataclass(frozen=True)
class Ceiling:
    """The most requests the engine's batch holds, and whose history showed it."""

    requests: float
    source: str  # "own history", or the job whose engines showed it


@dataclass(frozen=True)
class Headroom:
    """One instance's use of its engine's room at one scan."""

    utilisation: float  # now: the short trend line's value
    trend_seconds: float
    baseline: float | None  # its own normal utilisation, before the trend window
    short: Trend | None  # the trend over `trend_seconds`, and over LONG_WINDOWS of it
    long: Trend | None
    latest: float  # the utilisation's latest sample
    recent_peak: float  # the highest sample of the TURN_LOOKBACK_SECONDS before the latest
    noise: float  # one sample's jitter, as a standard deviation (`jitter`)
    horizon_seconds: float  # the horizon P(full) is judged at
    departed: bool  # above its own normal range
    kv_used: float | None  # the latest samples behind it
    running: float | None
    waiting: float | None
    ceiling: Ceiling | None

    @property
    def slope_per_minute(self) -> float | None:
        return self.short.slope if self.short else None

    @property
    def earlier(self) -> float:
        """The short trend line's value at the start of its window."""
        return self.utilisation - (self.slope_per_minute or 0.0) * self.trend_seconds / 60

    @property
    def full_in_seconds(self) -> float | None:
        """Until FULL_LEVEL at the short trend's slope: 0 when full now, None when not filling."""
        if self.utilisation >= FULL_LEVEL:
            return 0.0
        slope = self.slope_per_minute or 0.0
        return (FULL_LEVEL - self.utilisation) / slope * 60 if slope > 0 else None

    @property
    def binding(self) -> str:
        """The room that is fuller now: "batch_slots" or "kv_cache"."""
        slots = self.running / self.ceiling.requests if self.ceiling and self.running is not None else 0.0
        return "batch_slots" if slots > (self.kv_used or 0.0) else "kv_cache"

    @cached_property
    def probability(self) -> float | None:
        """P(full within the horizon) under both windows' trends, the lesser: filling now (the short
        window) and for long enough not to be a burst (the long one); None without them."""
        chances = [_probability(self.utilisation, fit, self.horizon_seconds) for fit in (self.short, self.long)]
        return None if None in chances else min(c for c in chances if c is not None)

    @cached_property
    def short_probability(self) -> float | None:
        """P(full within the horizon) under the short window's trend alone: filling now."""
        return _probability(self.utilisation, self.short, self.horizon_seconds)

    @property
    def turned(self) -> bool:
        """The latest sample lies below the short trend line, and below the series' recent peak,
        by more than the gauge's jitter: it has fallen back, and the line no longer forecasts."""
        tolerance = max(TURN_SIGMAS * self.noise, TURN_FLOOR)
        return self.latest < self.utilisation - tolerance and self.latest < self.recent_peak - tolerance

    @property
    def lives_full(self) -> bool:
        """Its own normal level is already full: a batch workload, not a saturation to come."""
        return self.baseline is not None and self.baseline >= FULL_LEVEL

    def filling_now(self, probability: float) -> bool:
        """Filling up now: off its own normal, not turned back, and the short window's line
        forecast full within the horizon with at least this probability."""
        chance = self.short_probability
        return chance is not None and chance >= probability and self._rising()

    def filling(self, probability: float) -> bool:
        """Filling now, and for long enough not to be a burst: both windows forecast it full
        within the horizon with at least this probability."""
        chance = self.probability
        return chance is not None and chance >= probability and self._rising()

    def _rising(self) -> bool:
        return self.departed and not self.lives_full and not self.turned

    def forecast(self) -> str:
        """The forecast with its evidence, in words: which room, how full, how fast, since when."""
        if self.binding == "batch_slots" and self.ceiling is not None and self.running is not None:
            # The share is the trend line's level now; the latest sample is said apart, so that
            # "70 % full" never stands beside a count that is 47 % of the ceiling unexplained.
            ceiling = self.ceiling.requests
            room = (
                f"batch {self.utilisation:.0%} full (about {self.utilisation * ceiling:.0f} of ~{ceiling:.0f} "
                f"running on its {self.trend_seconds / 60:.0f}-min trend, {self.running:.0f} in the latest sample; "
                f"~{ceiling:.0f} is the most it ran while others waited, {self.ceiling.source})"
            )
        else:
            room = f"KV cache {self.utilisation:.0%} full"
        if self.binding == "batch_slots" and self.kv_used is not None:
            room += f", KV cache {self.kv_used:.0%}"
        text = f"{room}, from {self.earlier:.0%} {self.trend_seconds / 60:.0f} min ago"
        if self.full_in_seconds == 0:
            return text + "; full now" + (f", {self.waiting:.0f} waiting" if self.waiting else "")
        if self.full_in_seconds is not None:
            text += f"; full in ~{max(1.0, self.full_in_seconds / 60):.0f} min"
        return text + (f", p = {self.probability:.2f}" if self.probability is not None else "")

    def figures(self) -> dict[str, float | str | bool | None]:
        """What a transition stores about it."""
        return {
            "utilisation": self.utilisation,
            "earlier": self.earlier,
            "trend_seconds": self.trend_seconds,
            "baseline": self.baseline,
            "slope_per_minute": self.slope_per_minute,
            "full_in_seconds": self.full_in_seconds,
            "probability": self.probability,
            "short_probability": self.short_probability,
            "latest": self.latest,
            "recent_peak": self.recent_peak,
            "noise": self.noise,
            "turned": self.turned,
            "horizon_seconds": self.horizon_seconds,
            "departed": self.departed,
            "binding": self.binding,
            "kv_used": self.kv_used,
            "running": self.running,
            "waiting": self.waiting,
            "ceiling": self.ceiling.requests if self.ceiling else None,
            "ceiling_source": self.ceiling.source if self.ceiling else None,
        }


def _by_time(samples: Samples | None) -> dict[float, float]:
    return dict(samples or [])


def slot_ceiling(running: Samples, waiting: Samples, used: Samples | None) -> float | None:
    """The most requests this engine ran while others waited and its KV cache was not nearly
    full, where that is a plateau: most of those steps ran within PLATEAU of it (a full batch
    holds its size while the queue varies; a queue seen at every batch size is a gauge's noise
    or a scheduler's lag, not a ceiling), at least MIN_SIGHTINGS of them, and the engine never
    ran more than CEILING_SLACK above it."""
    queued, kv = _by_time(waiting), _by_time(used)
    with_queue = [r for ts, r in running if queued.get(ts, 0.0) >= 1 and kv.get(ts, 0.0) < KV_BOUND]
    if not with_queue:
        return None
    ceiling = max(with_queue)
    at_ceiling = [r for r in with_queue if r >= PLATEAU * ceiling]
    if len(at_ceiling) < max(MIN_SIGHTINGS, len(with_queue) / 2) or ceiling < 1:
        return None
    return None if max(r for _, r in running) > ceiling * CEILING_SLACK else ceiling


def ceilings(
    targets: list[ServingInstance],
    series: Mapping[str, Mapping[str, SignalSeries]],
    running_id: str,
    waiting_id: str,
    used_id: str,
) -> dict[str, Ceiling]:
    """Each instance's batch ceiling: its own, else the highest of its job's engines of its stack."""
    own: dict[str, float] = {}
    for serving in targets:
        running = series.get(running_id, {}).get(serving.instance)
        waiting = series.get(waiting_id, {}).get(serving.instance)
        if running and waiting:
            used = series.get(used_id, {}).get(serving.instance)
            found = slot_ceiling(running.samples, waiting.samples, used.samples if used else None)
            if found is not None:
                own[serving.instance] = found
    by_group: dict[tuple[str | None, str | None], float] = {}
    for serving in targets:
        if serving.instance in own:
            key = (serving.job, serving.stack)
            by_group[key] = max(by_group.get(key, 0.0), own[serving.instance])
    found_ceilings: dict[str, Ceiling] = {}
    for serving in targets:
        if serving.instance in own:
            found_ceilings[serving.instance] = Ceiling(own[serving.instance], "own history")
        elif serving.job is not None and (serving.job, serving.stack) in by_group:
            found_ceilings[serving.instance] = Ceiling(by_group[(serving.job, serving.stack)], f"job {serving.job}")
    return found_ceilings


def utilisation(used: Samples | None, running: Samples | None, ceiling: Ceiling | None) -> Samples:
    """The fuller room's share at each step either room is known."""
    kv = _by_time(used)
    slots = {ts: r / ceiling.requests for ts, r in running or []} if ceiling else {}
    return [(ts, max(kv.get(ts, 0.0), slots.get(ts, 0.0))) for ts in sorted(kv.keys() | slots.keys())]


def _latest(series: SignalSeries | None, now: float) -> float | None:
    """The last sample at or before `now`."""
    if not series:
        return None
    upto = bisect_left(series.samples, now + 1e-6, key=sample_time)
    return series.samples[upto - 1][1] if upto else None


def headrooms(
    targets: list[ServingInstance],
    series: Mapping[str, Mapping[str, SignalSeries]],
    ids: tuple[str, str, str],
    now: float,
    trend_seconds: float,
    horizon_seconds: float,
) -> dict[str, Headroom]:
    """Every instance's headroom at `now` (by instance), the trends in one batch; an instance without
    a KV share or a batch ceiling, or with too few recent steps, has none."""
    used_id, running_id, waiting_id = ids
    known = ceilings(targets, series, running_id, waiting_id, used_id)
    rows: list[tuple[ServingInstance, Samples]] = []
    windows: list[Samples] = []
    for serving in targets:
        used = series.get(used_id, {}).get(serving.instance)
        running = series.get(running_id, {}).get(serving.instance)
        level = utilisation(
            used.samples if used else None, running.samples if running else None, known.get(serving.instance)
        )
        level = level[: bisect_left(level, now + 1e-6, key=sample_time)]
        recent = level[bisect_left(level, now - trend_seconds, key=sample_time) :]
        if len(recent) >= MIN_TREND_POINTS:
            rows.append((serving, level))
            windows.append(recent)
    sustained = [level[bisect_left(level, now - LONG_WINDOWS * trend_seconds, key=sample_time) :] for _, level in rows]
    fitted = theil_sen(
        [[(ts - now) / 60 for ts, _ in window] for window in windows + sustained],
        [[v for _, v in window] for window in windows + sustained],
        TREND_CONFIDENCE,
    )
    found: dict[str, Headroom] = {}
    short_fits, long_fits = fitted[: len(rows)], fitted[len(rows) :]
    for (serving, level), window, trend, long in zip(rows, windows, short_fits, long_fits, strict=True):
        slope = trend.slope if trend else 0.0
        now_level = statistics.median(v - slope * (ts - now) / 60 for ts, v in window)
        normal = normal_range([v for _, v in level[: len(level) - len(window)]], None)
        instance = serving.instance
        found[instance] = Headroom(
            utilisation=now_level,
            trend_seconds=trend_seconds,
            baseline=normal.centre if normal else None,
            short=trend,
            long=long,
            latest=window[-1][1],
            recent_peak=max(
                (v for ts, v in window[:-1] if ts >= window[-1][0] - TURN_LOOKBACK_SECONDS), default=window[-1][1]
            ),
            noise=jitter([v for _, v in level]),
            horizon_seconds=horizon_seconds,
            departed=normal is None or now_level - normal.centre > normal.spread,
            kv_used=_latest(series.get(used_id, {}).get(instance), now),
            running=_latest(series.get(running_id, {}).get(instance), now),
            waiting=_latest(series.get(waiting_id, {}).get(instance), now),
            ceiling=known.get(instance),
        )
    return found


def jitter(values: list[float]) -> float:
    """How far one sample strays, as a standard deviation: the robust spread of the changes from
    one sample to the next (each holds two samples' noise, hence the square root of 2), about
    their median (a steady rise moves every step alike)."""
    steps = [b - a for a, b in itertools.pairwise(values)]
    if not steps:
        return 0.0
    centre = statistics.median(steps)
    return MAD_TO_SIGMA * statistics.median(abs(d - centre) for d in steps) / math.sqrt(2)


def _probability(level: float, trend: Trend | None, horizon_seconds: float) -> float | None:
    """P(the slope is at least what fills the room within the horizon), the slope's interval
    read as a normal spread; 1 when it is full already."""
    if level >= FULL_LEVEL:
        return 1.0
    if trend is None:
        return None
    slope, low, high = trend.slope, trend.low, trend.high
    needed = (FULL_LEVEL - level) / (horizon_seconds / 60)
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return 1.0 if slope >= needed else 0.0
    sigma = (high - low) / (2 * _Z)
    return _NORMAL.cdf((slope - needed) / sigma)
