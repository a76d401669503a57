"""vLLM's `vllm:lora_requests_info` as an engine serving LoRA adapters exports it.

vLLM (V0 `vllm/engine/metrics.py`, V1 `vllm/v1/metrics/loggers.py`) gives the gauge three labels,
and no `model_name` or `engine`: `max_lora` (the `--max-loras` budget; V0 exports "0" with LoRA
off, V1 only exports the gauge with `--enable-lora`), `running_lora_adapters` and
`waiting_lora_adapters` (the names of the adapters of the running and of the waiting requests,
comma-separated). Every engine iteration it sets the label set of the moment to the current
wall-clock time (`set_to_current_time`); prometheus_client keeps every label set it was ever
given, so the stale ones stay exported with the time they last held.

The label set of a moment follows from the engine's values (`lora_labels`): the traffic asks for
`adapters` distinct adapters, at most `max_loras` of them run at once (and no more than there are
running requests); the requests of an adapter beyond a full budget wait for a slot (`deferred`),
and a capacity queue of at least one request shows the adapter its requests are for, which is
already running. An adapter waiting outside the running ones at a full budget is the schedulers'
own rule for deferring a request (V0 and V1); a capacity queue shows only running adapters.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator

ADAPTERS = tuple(f"tenant-{i}" for i in range(1, 25))  # adapter names; the traffic asks for the first ones
LoraLabels = tuple[str, str, str]  # max_lora, running_lora_adapters, waiting_lora_adapters
LABEL_NAMES = ("max_lora", "running_lora_adapters", "waiting_lora_adapters")
LORA_OFF: LoraLabels = ("0", "", "")  # what V0 exports without --enable-lora


def lora_labels(p: dict[str, float]) -> LoraLabels | None:
    """The label set the engine sets to the current time at a moment with these values (None:
    LoRA is off)."""
    budget = round(p["max_loras"])
    if budget < 1:
        return None
    wanted = max(1, min(len(ADAPTERS), round(p["adapters"])))
    running = min(budget, wanted, max(1, math.ceil(p["running"])))
    waiting = list(ADAPTERS[running:wanted]) if running == budget and p["deferred"] >= 0.5 else []
    if p["waiting"] - p["deferred"] >= 1:
        waiting.append(ADAPTERS[0])
    return str(budget), ",".join(ADAPTERS[:running]), ",".join(waiting)


def label_sets(budget: int) -> Iterator[LoraLabels]:
    """Every label set `lora_labels` can give under this budget."""
    for running in range(1, budget + 1):
        beyond = [ADAPTERS[running:wanted] for wanted in range(running + 1, len(ADAPTERS) + 1)]
        for waiting in [(), *(beyond if running == budget else [])]:
            for queued in ((), ADAPTERS[:1]):
                yield str(budget), ",".join(ADAPTERS[:running]), ",".join((*waiting, *queued))


class LastSet:
    """When each label set was last set to the current time, as prometheus_client reports it:
    the label set of the moment reads the moment itself, a stale one the last moment (on a grid of
    `step` seconds) it held, and one never set yet is not exported (None)."""

    def __init__(self, params: Callable[[float], dict[str, float]], step: float) -> None:
        self.params = params
        self.step = step
        self.scanned: float | None = None  # the next grid moment to look at
        self.held: dict[LoraLabels | None, list[float]] = {}
        self.moments: dict[float, LoraLabels | None] = {}

    def at(self, t: float) -> LoraLabels | None:
        if t not in self.moments:
            self.moments[t] = lora_labels(self.params(t))
        return self.moments[t]

    def value(self, labels: LoraLabels, t: float, start: float) -> float | None:
        if self.at(t) == labels:
            return t
        grid = start if self.scanned is None else self.scanned
        while grid <= t:
            self.held.setdefault(lora_labels(self.params(grid)), []).append(grid)
            grid += self.step
        self.scanned = grid
        times = self.held.get(labels, [])
        index = bisect.bisect_right(times, t)
        return times[index - 1] if index else None
