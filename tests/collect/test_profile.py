"""Signal profiles: loading, rendering, threshold overrides (rca.collect.profile)."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

import pytest
import yaml

from rca.collect.profile import PROFILES_DIR, Profile, load_profile
from rca.config import ConfigError

SELECTORS = {
    "serving": 'instance=~"gpu-node-1(:[0-9]+)?",model_name="llama"',
    "gpu": 'Hostname=~"gpu-node-1"',
    "node": 'instance=~"gpu-node-1"',
    "pod": 'namespace="llm",pod="vllm-0"',
}
PARAMS = {"pinned_cpus": "4|5|6|7", "pinned_cpu_count": "4", "process_groups": "(?i).*(vllm).*"}
FOUR_SIGNALS = {"cpu_bound_ratio", "prefix_cache_hit_rate", "queue_median", "gpu_compute_to_memory"}


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile()


def all_queries(profile: Profile) -> list[tuple[str, str]]:
    return [(spec.id, alt.promql) for spec in profile.signals for alt in spec.queries]


def brackets_balanced(promql: str) -> bool:
    """Balanced and well nested (), {}, [] outside string literals."""
    pairs = {")": "(", "}": "{", "]": "["}
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for char in promql:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif char in "({[":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack and quote is None


def write_profile(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "vllm_dcgm.yaml").read_text())
    mutate(raw)
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_bundled_profile_loads_with_the_four_early_signals(profile: Profile) -> None:
    assert profile.name == "vllm_dcgm"
    signals = {s.id for s in profile.signals if s.kind == "signal"}
    assert signals == FOUR_SIGNALS
    assert set(profile.scopes) == {"serving", "gpu", "node", "pod"}


def test_bundled_profile_uses_the_domain_thresholds(profile: Profile) -> None:
    by_id = {s.id: s for s in profile.signals}
    assert (by_id["cpu_bound_ratio"].comparison, by_id["cpu_bound_ratio"].threshold) == (">", 0.82)
    assert (by_id["prefix_cache_hit_rate"].comparison, by_id["prefix_cache_hit_rate"].threshold) == ("<", 0.61)
    assert (by_id["queue_median"].comparison, by_id["queue_median"].threshold) == (">", 4.7)
    # no Prometheus metric for the Nsight ratio: a change-based proxy that says so
    proxy = by_id["gpu_compute_to_memory"]
    assert proxy.threshold is None and proxy.change is not None and proxy.comparison == "<"
    assert proxy.proxy_note and "proxy" in proxy.proxy_note.lower()


def test_what_a_user_reads_of_the_profile_names_no_other_stack_and_no_unseen_source(profile: Profile) -> None:
    """Titles, notes and query names reach the pages, the CLI and Slack: a signal's title holds for
    every stack (a stack's own variant is its query's `title`), and nothing cites "the article",
    a source the user has never seen."""
    stacks = [stack.title.split(" ")[0] for stack in profile.stacks.values()] + ["Triton", "TGI", "vLLM", "SGLang"]
    for spec in [*profile.signals, *profile.headroom]:
        assert not any(f"on {name}" in spec.title for name in stacks), spec.title
        texts = [spec.title, getattr(spec, "proxy_note", None) or ""]
        texts += [q.source for q in spec.queries] + [q.title or "" for q in spec.queries]
        assert not any("article" in text.lower() for text in texts), spec.id
    proxy = next(s for s in profile.signals if s.id == "gpu_compute_to_memory")
    assert proxy.proxy_note and "12 instructions per byte" in proxy.proxy_note


def test_signal_ids_are_unique(profile: Profile) -> None:
    ids = [s.id for s in profile.signals]
    assert len(ids) == len(set(ids))


def test_every_query_renders_with_the_selectors_and_parameters(profile: Profile) -> None:
    for spec in profile.signals:
        for alt in spec.queries:
            rendered = Template(alt.promql).substitute(SELECTORS | PARAMS)  # KeyError/ValueError on stray `$`
            # Nothing left to fill: a `$` only as a label_replace group (`$1`), written `$$1`.
            assert not re.search(r"\$(?!\d)", rendered), (spec.id, rendered)
            scope = spec.scope_of(alt)
            assert SELECTORS[scope] in rendered, f"{spec.id} does not use its own scope ${scope}"
            assert alt.render(SELECTORS | PARAMS) == rendered


def test_query_with_a_missing_placeholder_never_renders_blank(profile: Profile) -> None:
    cpu = next(s for s in profile.signals if s.id == "cpu_bound_ratio")
    configured = next(a for a in cpu.queries if "pinned_cpus" in a.placeholders())
    assert configured.placeholders() == {"node", "pinned_cpus"}
    assert configured.source.startswith("node_exporter")
    with pytest.raises(KeyError):
        configured.render(SELECTORS)


def test_cpu_bound_ratio_tries_processes_cadvisor_isolcpus_configured_then_all_cores(profile: Profile) -> None:
    cpu = next(s for s in profile.signals if s.id == "cpu_bound_ratio")
    sources = [(a.source.split()[0], cpu.scope_of(a), sorted(a.placeholders())) for a in cpu.queries]
    assert sources == [
        ("process-exporter", "node", ["node", "process_groups"]),
        ("process-exporter", "node", ["node", "pinned_cpu_count", "process_groups"]),
        ("SGLang", "serving", ["node", "serving"]),
        ("SGLang", "serving", ["pinned_cpu_count", "serving"]),
        ("cAdvisor", "pod", ["pod"]),
        ("node_exporter", "node", ["node"]),
        ("node_exporter", "node", ["node", "pinned_cpus"]),
        ("node_exporter", "node", ["node"]),
    ]


def test_profile_query_with_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    def typo(raw: dict) -> None:
        raw["signals"][0]["queries"][0]["promql"] += " * $pinned_cpu"

    with pytest.raises(ConfigError, match="pinned_cpu"):
        load_profile(str(write_profile(tmp_path, typo)))


def test_profile_query_that_does_not_use_its_own_scope_is_refused(tmp_path: Path) -> None:
    def wrong_scope(raw: dict) -> None:
        raw["signals"][0]["queries"][0]["scope"] = "pod"

    with pytest.raises(ConfigError, match=r"does not use its scope \$pod"):
        load_profile(str(write_profile(tmp_path, wrong_scope)))


def test_a_fragment_is_expanded_into_every_query_that_names_it(tmp_path: Path) -> None:
    """Shared PromQL is written once; each query holds it whole, `$$` kept for the render."""

    def shared(raw: dict) -> None:
        raw["fragments"]["up_once"] = 'label_replace(up{$node}, "x", "$$1", "job", "(.*)")'
        raw["signals"][0]["queries"][0]["promql"] = "sum($up_once) * $up_once_more"

    with pytest.raises(ConfigError, match="up_once_more"):  # a longer name is not the fragment
        load_profile(str(write_profile(tmp_path, shared)))

    def used(raw: dict) -> None:
        shared(raw)
        raw["signals"][0]["queries"][0]["promql"] = "sum($up_once) + count($up_once)"

    query = load_profile(str(write_profile(tmp_path, used))).signals[0].queries[0]
    assert query.placeholders() == {"node"}
    assert query.render({"node": 'instance="a"'}) == (
        'sum(label_replace(up{instance="a"}, "x", "$1", "job", "(.*)")) + '
        'count(label_replace(up{instance="a"}, "x", "$1", "job", "(.*)"))'
    )


def test_a_fragment_is_expanded_into_the_headroom_queries_too(tmp_path: Path) -> None:
    def used(raw: dict) -> None:
        raw["fragments"]["running"] = "vllm:num_requests_running{$serving}"
        raw["headroom"][0]["queries"][0]["promql"] = "sum($running)"

    query = load_profile(str(write_profile(tmp_path, used))).headroom[0].queries[0]
    assert query.render({"serving": 'instance="a"'}) == 'sum(vllm:num_requests_running{instance="a"})'


def test_a_fragment_named_like_a_scope_is_refused(tmp_path: Path) -> None:
    def clash(raw: dict) -> None:
        raw["fragments"]["serving"] = "up"

    with pytest.raises(ConfigError, match="serving"):
        load_profile(str(write_profile(tmp_path, clash)))


def test_every_rendered_query_has_balanced_brackets(profile: Profile) -> None:
    for signal_id, promql in all_queries(profile):
        rendered = Template(promql).substitute(SELECTORS | PARAMS)
        assert brackets_balanced(rendered), (signal_id, rendered)


def test_bracket_checker_catches_imbalance() -> None:
    assert brackets_balanced('sum(rate(x{a="(",b="}"}[5m]))')
    assert not brackets_balanced("sum(rate(x{a}[5m])")
    assert not brackets_balanced("sum(rate(x{a)[5m]})")


def test_every_selector_is_spliced_after_a_brace_or_comma(profile: Profile) -> None:
    # `{$serving}` or `{...,$serving}`: an empty selector must still leave valid PromQL.
    for signal_id, promql in all_queries(profile):
        for match in re.finditer(r"\$(serving|gpu|node|pod)\b", promql):
            assert promql[match.start() - 1] in "{,", (signal_id, promql)
            assert promql[match.end()] == "}", (signal_id, promql)


def test_absolute_threshold_override_replaces_the_threshold(profile: Profile) -> None:
    changed = profile.with_thresholds({"cpu_bound_ratio": 0.9, "queue_median": 10})
    by_id = {s.id: s for s in changed.signals}
    assert by_id["cpu_bound_ratio"].threshold == 0.9
    assert by_id["cpu_bound_ratio"].change is None
    assert by_id["queue_median"].threshold == 10
    original = {s.id: s for s in profile.signals}
    assert original["cpu_bound_ratio"].threshold == 0.82  # the cached profile is untouched
    assert by_id["prefix_cache_hit_rate"] == original["prefix_cache_hit_rate"]


def test_change_override_replaces_the_relative_change(profile: Profile) -> None:
    changed = profile.with_thresholds({"gpu_compute_to_memory": 0.25})
    spec = next(s for s in changed.signals if s.id == "gpu_compute_to_memory")
    assert spec.change == 0.25
    assert spec.threshold is None
    original = next(s for s in profile.signals if s.id == "gpu_compute_to_memory")
    assert spec.min_delta == original.min_delta and spec.queries == original.queries


def test_change_override_must_be_positive(profile: Profile) -> None:
    with pytest.raises(ConfigError, match="request_rate"):
        profile.with_thresholds({"request_rate": 0})


def test_unknown_override_id_is_an_error_naming_it(profile: Profile) -> None:
    with pytest.raises(ConfigError, match="cpu_binding_rate") as info:
        profile.with_thresholds({"cpu_bound_ratio": 0.9, "cpu_binding_rate": 0.8})
    assert "cpu_bound_ratio" in str(info.value)  # the message lists the known ids too


def test_no_overrides_keep_the_profile(profile: Profile) -> None:
    assert profile.with_thresholds({}).signals == profile.signals


def test_profile_file_with_threshold_and_change_is_refused(tmp_path: Path) -> None:
    def both(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "queue_median")
        spec["change"] = 0.5

    with pytest.raises(ConfigError) as info:
        load_profile(str(write_profile(tmp_path, both)))
    message = str(info.value)
    assert "queue_median" in message and "exactly one of threshold or change" in message


def test_profile_file_with_neither_threshold_nor_change_is_refused(tmp_path: Path) -> None:
    def neither(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "queue_median")
        del spec["threshold"]

    with pytest.raises(ConfigError, match="queue_median"):
        load_profile(str(write_profile(tmp_path, neither)))


def test_profile_file_with_unknown_field_is_refused(tmp_path: Path) -> None:
    def typo(raw: dict) -> None:
        raw["signals"][0]["treshold"] = 1

    with pytest.raises(ConfigError, match="treshold"):
        load_profile(str(write_profile(tmp_path, typo)))


def test_profile_file_that_is_not_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("signals: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_profile(str(path))


def test_missing_profile_lists_the_bundled_ones() -> None:
    with pytest.raises(ConfigError, match="vllm_dcgm"):
        load_profile("no_such_profile")


def test_a_query_threshold_on_a_change_signal_is_refused(tmp_path: Path) -> None:
    def mixed(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "request_rate")
        spec["queries"][0]["threshold"] = 3

    with pytest.raises(ConfigError, match="request_rate.*needs a signal with a threshold"):
        load_profile(str(write_profile(tmp_path, mixed)))


def test_each_scope_is_found_by_more_than_one_series_of_each_exporter(profile: Profile) -> None:
    """A keep-list that drops one series (the queue gauge, node_cpu_seconds_total) must not hide
    the exporter: every scope's probe names several of each exporter's series."""
    probes = {scope: set(spec.probe.split("|")) for scope, spec in profile.scopes.items()}
    for prefix in ("vllm:", "sglang:", "tgi_", "nv_inference_"):
        assert len({name for name in probes["serving"] if name.startswith(prefix)}) >= 2, prefix
    assert len({name for name in probes["node"] if name.startswith("node_")}) >= 2
    assert len(probes["pod"]) >= 2 and len(probes["gpu"]) >= 2


def test_codes_and_stepped_levels_are_declared_as_such(profile: Profile) -> None:
    readings = {spec.id: spec.reading for spec in profile.signals}
    assert readings["gpu_throttle_reasons"] == readings["xid_errors"] == "code"
    assert readings["sm_clock"] == "level"
    flags = next(s for s in profile.signals if s.id == "gpu_throttle_reasons").flags
    assert flags[0x8] == "HwSlowdown" and flags[0x40] == "HwThermalSlowdown" and flags[0x20] == "SwThermalSlowdown"


@pytest.mark.parametrize(
    "promql",
    [
        "avg by (UUID) (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{$gpu})",
        "max(avg_over_time(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{$gpu}[5m]))",
        "quantile_over_time(0.5, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{$gpu}[10m])",
        "max(rate(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{$gpu}[5m]))",
    ],
)
def test_a_code_read_through_an_average_is_refused(tmp_path: Path, promql: str) -> None:
    def averaged(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "gpu_throttle_reasons")
        spec["queries"][0]["promql"] = promql

    with pytest.raises(ConfigError, match="gpu_throttle_reasons.*blends samples with .*a code must never be"):
        load_profile(str(write_profile(tmp_path, averaged)))


def test_a_code_read_raw_or_by_its_latest_sample_loads(tmp_path: Path) -> None:
    def latest(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "gpu_throttle_reasons")
        spec["queries"][0]["promql"] = "max by (UUID) (last_over_time(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{$gpu}[1m]))"

    assert load_profile(str(write_profile(tmp_path, latest))).signals


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("flags", {3: "Both"}, r"flags \[3\] are not single bits"),
        ("reading", "measure", "flags name the bits of a code"),
    ],
)
def test_flags_that_are_not_bits_of_a_code_are_refused(tmp_path: Path, field: str, value: object, message: str) -> None:
    def bad(raw: dict) -> None:
        spec = next(s for s in raw["signals"] if s["id"] == "gpu_throttle_reasons")
        spec[field] = value

    with pytest.raises(ConfigError, match=message):
        load_profile(str(write_profile(tmp_path, bad)))
