"""What the scanner keeps between scans: per signal and instance, the samples of one window of
history (this hour, or the hour around the same time yesterday), and which spans of it each
instance has had read.

A scan asks Prometheus only for what its windows lack: the steps since the last read (`fresh`),
and, newest first, at most a budget of the history never read (`fill`: the scanner's start, a new
instance, a gap). The newest history first, because the current value and TTFT against its SLO
need only the last minutes and the trend the last quarter hour, while the baseline needs the
whole window anyway. An instance whose windows still lack history is warming (`lacks`).
Pure: the scanner reads Prometheus, the window splices what it read.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

from rca.scan.fleet import SignalSeries, sample_time

Span = tuple[float, float]  # [first, last] step times, both read
REACH_QUANTILE = 0.9  # how far a window's level reached: its 90th percentile up, its 10th down


@dataclass(frozen=True)
class HourLevel:
    """One signal's level over a window (the same hour yesterday): its median, and how far it
    reached each way (`REACH_QUANTILE`), not its extremes: one scrape is no level it held."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> HourLevel:
        if len(values) < 2:
            return cls(values[0], values[0], values[0])
        cuts = statistics.quantiles(values, n=100, method="inclusive")  # the 1st to the 99th percentile
        upper = round(REACH_QUANTILE * 100)
        return cls(statistics.median(values), cuts[99 - upper], cuts[upper - 1])

    def reach(self, sign: float) -> float:
        """How far it reached towards a threshold above it (`sign` +1) or below it (-1)."""
        return self.high if sign > 0 else self.low


def _merged(kept: SignalSeries | None, read: SignalSeries | None, span: Span) -> SignalSeries | None:
    """The kept samples outside `span` and the read ones inside it. One series is one
    alternative's: when another answered, the newer side wins (a read at the top replaces the
    kept series, an older one of another source is dropped)."""
    if kept is None:
        return read
    samples = kept.samples
    before = samples[: bisect_left(samples, span[0], key=sample_time)]
    after = samples[bisect_right(samples, span[1], key=sample_time) :]
    if read is None or read.source != kept.source:
        if read is not None and not after:
            return read
        rest = before + after
        return SignalSeries(rest, kept.source) if rest else None
    return SignalSeries(before + read.samples + after, kept.source)


def _with(spans: list[Span], span: Span, step: float) -> list[Span]:
    """`spans` (sorted, apart) with `span` added, joined to those it overlaps or touches."""
    first, last = span
    out: list[Span] = []
    for a, b in spans:
        if b + step < first or a - step > last:
            out.append((a, b))
        else:
            first, last = min(first, a), max(last, b)
    out.append((first, last))
    return sorted(out)


@dataclass
class Window:
    """One stretch of history at one step, for every instance."""

    step: int
    series: dict[str, dict[str, SignalSeries]] = field(default_factory=dict)  # signal -> instance -> series
    covered: dict[str, list[Span]] = field(default_factory=dict)  # instance -> the spans read for it
    until: float | None = None  # the newest step read
    changes: int = 0  # how many times its samples changed: what was computed from them is stale

    def keep(self, start: float, end: float) -> None:
        """Forget what lies before `start` (the window slid on); forget everything when `end`
        lies before the last read (time went back: the kept samples are of another time)."""
        if self.until is not None and end < self.until:
            self.series, self.covered, self.until = {}, {}, None
            self.changes += 1
            return
        for by_instance in self.series.values():
            for instance, kept in list(by_instance.items()):
                begin = bisect_left(kept.samples, start, key=sample_time)
                if begin == len(kept.samples):
                    del by_instance[instance]
                elif begin:
                    by_instance[instance] = SignalSeries(kept.samples[begin:], kept.source)
                self.changes += bool(begin)
        for instance, spans in list(self.covered.items()):
            clipped = [(max(a, start), b) for a, b in spans if b >= start]
            if clipped:
                self.covered[instance] = clipped
            else:
                del self.covered[instance]

    def fresh(self, end: float, most: float, again: int) -> Span | None:
        """The steps since the last read, with the last `again` steps read once more (a late
        scrape changes them); None before the first read. At most `most` steps: the rest of a
        long gap is left to `fill`, newest first."""
        if self.until is None or (end <= self.until and not again):
            return None
        first = max(self.until - (again - 1) * self.step, end - (most - 1) * self.step)
        return (first, end)

    def lacks(self, instance: str, start: float, end: float) -> list[Span]:
        """The spans of [start, end] never read for this instance, oldest first."""
        gaps, at = [], start
        for a, b in self.covered.get(instance, []):
            if b < at:
                continue
            if a > end:
                break
            if a > at:
                gaps.append((at, a - self.step))
            at = b + self.step
        if at <= end:
            gaps.append((at, end))
        return gaps

    def fill(self, instances: Iterable[str], start: float, end: float, most: float) -> Span | None:
        """The newest `most` steps of [start, end] that some instance lacks; None when none does."""
        newest = max((gaps[-1][1] for i in instances if (gaps := self.lacks(i, start, end))), default=None)
        if newest is None:
            return None
        return (max(start, newest - (most - 1) * self.step), newest)

    def splice(self, read: dict[str, dict[str, SignalSeries]], span: Span, instances: Iterable[str]) -> None:
        """What a read over `span` found for these targets, in place of what was kept there."""
        targets = list(instances)
        for signal, found in read.items():
            kept = self.series.setdefault(signal, {})
            for instance in targets:
                merged = _merged(kept.get(instance), found.get(instance), span)
                if merged is None:
                    kept.pop(instance, None)
                else:
                    kept[instance] = merged
        for instance in targets:
            self.covered[instance] = _with(self.covered.get(instance, []), span, self.step)
        self.until = max(self.until or span[1], span[1])
        self.changes += 1

    def of(self, instances: Iterable[str]) -> dict[str, dict[str, SignalSeries]]:
        """Each signal's kept series of these targets (the window may hold targets gone since)."""
        wanted = set(instances)
        return {
            signal: {i: kept for i, kept in by_instance.items() if i in wanted}
            for signal, by_instance in self.series.items()
        }

    def levels(self) -> dict[str, dict[str, HourLevel]]:
        """Each signal's level over the window, per instance kept: the baseline of the day before."""
        return {
            signal: {i: HourLevel.of([v for _, v in kept.samples]) for i, kept in by_instance.items()}
            for signal, by_instance in self.series.items()
        }
