"""Signal profiles as data: which series to pull, with which PromQL, judged how.

A profile is a YAML file (see `rca/profiles/`), so adding a serving stack is adding a file,
not code. Queries are `string.Template`s over the scope selectors `$serving`, `$gpu`, `$node`,
`$pod` and the operator parameters in `PARAMETERS` (e.g. `$pinned_cpus`). An alternative is only
rendered when every placeholder it names has a value, so a missing one is skipped, never blanked.
A profile's `fragments` are PromQL pieces several alternatives share (`$name` in a query), written
once and expanded as the profile loads, so every alternative reads as the whole query it runs.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from rca.config import ConfigError, FileConfig
from rca.config.files import DEFAULT_STACK_SERVICES
from rca.config.loader import load_yaml

PROFILES_DIR = Path(__file__).resolve().parents[1] / "profiles"
DEFAULT_PROFILE = "vllm_dcgm"

Scope = Literal["serving", "gpu", "node", "pod"]
SCOPES: tuple[str, ...] = ("serving", "gpu", "node", "pod")
# Placeholders filled from the config file rather than from the alert; an alternative that names
# one runs only when the operator set it.
PARAMETERS: dict[str, str] = {
    "pinned_cpus": "PromQL regex of the configured pinned CPU ids (config file `pinned_cpus`)",
    "pinned_cpu_count": "how many CPUs `pinned_cpus` names",
    "process_groups": "PromQL regex of the engine's process-exporter group names (config file `process_groups`)",
}


class QueryAlternative(BaseModel):
    """One way to compute a signal; the first alternative that returns data is used."""

    model_config = {"extra": "forbid"}

    source: str
    promql: str
    stacks: list[str] | None = Field(default=None, description="serving stacks this query applies to; none = all")
    scope: Scope | None = Field(default=None, description="scope of this query; unset = the signal's scope")
    threshold: float | None = Field(
        default=None,
        description="this query's own limit, where it measures the signal on another scale (throttled seconds "
        "instead of throttled periods); unset = the signal's threshold",
    )
    title: str | None = Field(
        default=None,
        description="the finding's title when this query measures it, where that differs from the signal's (a mean "
        "where the others give a p95): a finding names what its own stack measured, never another stack's variant",
    )
    unit: str | None = Field(
        default=None, max_length=16, description="this query's unit, where its own threshold is on another scale"
    )

    @model_validator(mode="after")
    def _known_placeholders(self) -> QueryAlternative:
        template = Template(self.promql)
        if not template.is_valid():
            raise ValueError(f"query {self.source!r}: stray `$` (write `$$` for a literal dollar)")
        unknown = set(template.get_identifiers()) - set(SCOPES) - set(PARAMETERS)
        if unknown:
            raise ValueError(f"query {self.source!r}: unknown placeholder(s) ${', $'.join(sorted(unknown))}")
        return self

    def placeholders(self) -> set[str]:
        """The scopes and parameters this query needs a value for."""
        return set(Template(self.promql).get_identifiers())

    def render(self, values: dict[str, str]) -> str:
        """The PromQL with every placeholder filled; a missing value is a KeyError, never a blank.
        Callers check `placeholders() <= values.keys()` first."""
        return Template(self.promql).substitute(values)


class SeriesSpec(BaseModel):
    """A series to pull, per target: its alternatives in order, the first with data is used."""

    model_config = {"extra": "forbid"}

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    scope: Scope
    unit: str = Field(default="", max_length=16)  # stored in a 16-character column
    queries: list[QueryAlternative] = Field(min_length=1)

    def scope_of(self, alternative: QueryAlternative) -> str:
        """The scope an alternative runs in: its own, else the signal's."""
        return alternative.scope or self.scope


# PromQL that blends samples into a value none of them had: a code or a stepped level must never
# pass through one of these (half of throttle reasons 0x48 is 0x24, two reasons that never happened).
BLENDING = re.compile(
    r"\b(avg|avg_over_time|sum_over_time|rate|irate|increase|deriv|quantile|quantile_over_time|"
    r"histogram_quantile|stddev|stdvar|stddev_over_time|stdvar_over_time)\s*(\(|by\b|without\b)"
)


class SignalSpec(SeriesSpec):
    """A series to pull and the rule that says whether it is abnormal.

    Either `threshold` (absolute, like the KV cache's 0.82 or the median queue's 4.7) or `change` (relative to
    the pre-onset baseline, for series whose healthy level differs per fleet) decides a breach.

    `reading` says what a sample is: a `measure` (a rate, a share, a latency) is judged by its median
    over the current minutes; a `level` that steps (a clock) by its latest sample, shown beside the
    window's mean; a `code` (a bitmask, an XID, an info series' value) by its latest sample and the set
    of codes seen, never by any average of codes. `flags` names a bitmask code's bits.
    """

    kind: Literal["signal", "supporting"] = "supporting"
    comparison: Literal[">", "<"]
    threshold: float | None = None
    change: float | None = Field(default=None, gt=0)
    min_delta: float = Field(default=0.0, ge=0)
    proxy_note: str | None = None
    reading: Literal["measure", "level", "code"] = "measure"
    flags: dict[int, str] = Field(default_factory=dict, description="a bitmask code's bits by value (0x8: HwSlowdown)")

    @model_validator(mode="after")
    def _one_rule(self) -> SignalSpec:
        if (self.threshold is None) == (self.change is None):
            raise ValueError(f"signal {self.id}: set exactly one of threshold or change")
        if self.change is not None and any(q.threshold is not None for q in self.queries):
            raise ValueError(f"signal {self.id}: a query's own threshold needs a signal with a threshold, not a change")
        return self

    @model_validator(mode="after")
    def _readings_unblended(self) -> SignalSpec:
        if self.flags and self.reading != "code":
            raise ValueError(f"signal {self.id}: flags name the bits of a code (reading: code)")
        not_bits = sorted(bit for bit in self.flags if bit <= 0 or bit & (bit - 1))
        if not_bits:
            raise ValueError(f"signal {self.id}: flags {not_bits} are not single bits")
        if self.reading != "measure":
            for alternative in self.queries:
                if blended := BLENDING.search(alternative.promql):
                    raise ValueError(
                        f"signal {self.id}: query {alternative.source!r} blends samples with {blended.group(1)}, "
                        f"which a {self.reading} must never be (read it raw, or with max/min/last_over_time)"
                    )
        return self

    def measured_by(self, source: str | None) -> SignalSpec:
        """The signal as the alternative named `source` measures it: with that query's own title,
        threshold and unit where it has them (an operator's threshold override applies to the signal's)."""
        alternative = next((q for q in self.queries if q.source == source), None)
        if alternative is None:
            return self
        update: dict[str, Any] = {}
        if alternative.threshold is not None:
            update["threshold"] = alternative.threshold
        if alternative.title is not None:
            update["title"] = alternative.title
        if alternative.unit is not None:
            update["unit"] = alternative.unit
        return self.model_copy(update=update) if update else self


class HeadroomSpec(SeriesSpec):
    """A series of what an engine uses of something it can run out of (`rca.scan.saturation`):
    the fleet scan forecasts when it is full, long before a queue forms. `role` says what the
    scan makes of it: `used` is a share of a fixed capacity (KV blocks: full at 1), `running` the
    requests in the batch (its ceiling learnt from when others waited), `waiting` the requests
    queued (raw, not a median: it tells when the batch was full)."""

    role: Literal["used", "running", "waiting"]


class ScopeSpec(BaseModel):
    probe: str = Field(description="regex of metric names whose presence proves the scope matched")


class StackSpec(BaseModel):
    """A serving stack (vLLM V1, SGLang, ...), recognised by the metric names it exports."""

    title: str
    probe: str = Field(description="regex of metric names only this stack exports")


class IdentitySpec(BaseModel):
    """A series whose labels name one machine in several ways (an address and a name).

    `same` labels are interchangeable spellings of the machine. `leads_to_same` labels name
    something that lives on exactly one machine (a pod IP): they lead to the machine, but the
    machine does not lead back to them, since it may run many pods. `pod_labels` do the same for
    the pod's name.
    """

    model_config = {"extra": "forbid"}

    metric: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    same: list[str] = Field(min_length=1)
    leads_to_same: list[str] = Field(default_factory=list)
    # Labels naming the Kubernetes pod a series is about (e.g. [namespace, pod]): an alert that
    # names only its pod finds its machine through them.
    pod_labels: list[str] = Field(default_factory=list, max_length=2)


def _expand_fragments(raw: Any) -> Any:
    """The raw profile with every `$fragment` in its queries replaced by the fragment's PromQL
    (`$$` stays a literal dollar); a fragment named like a scope or parameter is an error."""
    if not isinstance(raw, dict) or not isinstance(raw.get("fragments"), dict) or not raw["fragments"]:
        return raw
    fragments: dict[str, Any] = raw["fragments"]
    clash = sorted(set(fragments) & (set(SCOPES) | set(PARAMETERS)))
    if clash:
        raise ValueError(f"fragments: {', '.join(clash)} already name a scope or parameter")
    named = re.compile(r"(?<!\$)\$(" + "|".join(map(re.escape, sorted(fragments, key=len, reverse=True))) + r")\b")
    expanded = {}
    for section in ("signals", "headroom"):
        specs = []
        for spec in raw.get(section) or []:
            if isinstance(spec, dict) and isinstance(spec.get("queries"), list):
                queries = [
                    q | {"promql": named.sub(lambda m: str(fragments[m.group(1)]).strip(), q["promql"])}
                    if isinstance(q, dict) and isinstance(q.get("promql"), str)
                    else q
                    for q in spec["queries"]
                ]
                spec = spec | {"queries": queries}
            specs.append(spec)
        if section in raw:
            expanded[section] = specs
    return raw | expanded


class Profile(BaseModel):
    model_config = {"extra": "forbid"}

    name: str
    description: str = ""
    fragments: dict[str, str] = Field(
        default_factory=dict, description="PromQL pieces shared by several queries, named `$name` in them"
    )
    scopes: dict[Scope, ScopeSpec]
    identities: list[IdentitySpec] = Field(
        default_factory=list, description="series that join a host's spellings across exporters"
    )
    stacks: dict[str, StackSpec] = Field(default_factory=dict, description="in probing order, most specific first")
    signals: list[SignalSpec]
    headroom: list[HeadroomSpec] = Field(
        default_factory=list, description="what each engine can run out of, for the fleet scan's saturation forecasts"
    )

    @model_validator(mode="before")
    @classmethod
    def _fragments_expanded(cls, raw: Any) -> Any:
        return _expand_fragments(raw)

    @model_validator(mode="after")
    def _known_stacks(self) -> Profile:
        for spec in [*self.signals, *self.headroom]:
            for alternative in spec.queries:
                unknown = set(alternative.stacks or ()) - set(self.stacks)
                if unknown:
                    raise ValueError(f"signal {spec.id}: query for unknown stack(s) {', '.join(sorted(unknown))}")
                scope = spec.scope_of(alternative)
                if scope not in alternative.placeholders():
                    raise ValueError(f"signal {spec.id}: query {alternative.source!r} does not use its scope ${scope}")
                undeclared = (alternative.placeholders() & set(SCOPES)) - set(self.scopes)
                if undeclared:
                    raise ValueError(
                        f"signal {spec.id}: query uses undeclared scope(s) {', '.join(sorted(undeclared))}"
                    )
        return self

    def with_thresholds(self, thresholds: dict[str, float]) -> Profile:
        """A copy with operator thresholds applied (unknown ids are an error, not ignored)."""
        known = {s.id for s in self.signals}
        unknown = sorted(set(thresholds) - known)
        if unknown:
            raise ConfigError(
                f"RCA_CONFIG_FILE: thresholds: unknown signal id(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        signals = []
        for spec in self.signals:
            if spec.id in thresholds:
                value = thresholds[spec.id]
                update = {"threshold": value, "change": None} if spec.threshold is not None else {"change": value}
                try:  # validate, so a change override keeps its `> 0` rule
                    spec = SignalSpec.model_validate(spec.model_dump() | update)
                except ValidationError as exc:
                    raise ConfigError(f"RCA_CONFIG_FILE: thresholds: {spec.id}: {exc.errors()[0]['msg']}") from None
            signals.append(spec)
        return self.model_copy(update={"signals": signals})


def profile_for(config: FileConfig) -> Profile:
    """The profile the operator chose, with their thresholds, checked against their stack override."""
    profile = load_profile(config.profile or DEFAULT_PROFILE).with_thresholds(config.thresholds)
    if config.stack and config.stack not in profile.stacks:
        raise ConfigError(f"RCA_CONFIG_FILE: stack: unknown stack {config.stack!r}; known: {', '.join(profile.stacks)}")
    unknown = sorted(set(config.traces.stack_services) - set(DEFAULT_STACK_SERVICES) - set(profile.stacks))
    if unknown:
        raise ConfigError(
            f"RCA_CONFIG_FILE: traces: stack_services: unknown stack(s) {', '.join(unknown)}; "
            f"known: {', '.join(profile.stacks)}"
        )
    return profile


@lru_cache(maxsize=16)
def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Load a bundled profile by name, or a profile file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        bundled = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ConfigError(f"profile {name_or_path!r} not found (bundled: {bundled})")
    return load_yaml(path, Profile, "profile")
