"""The operator's pinned-CPU list (`pinned_cpus` in RCA_CONFIG_FILE): parsing and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from rca.collect.promql import cpu_list_regex, query_params
from rca.config import ConfigError, FileConfig, load_file_config
from rca.config.cpus import parse_cpu_list


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("4-7,12", [4, 5, 6, 7, 12]),
        ("3", [3]),
        ("0,2,4", [0, 2, 4]),
        (" 4 - 5 , 9 ", [4, 5, 9]),
        ("12,4-6,5", [4, 5, 6, 12]),  # sorted, overlaps merged
        ("7-7", [7]),
    ],
)
def test_cpu_list_ranges_singles_and_whitespace(text: str, cpus: list[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", " ", "4,,5", "4-", "-3", "7-4", "a-b", "4-7-9", "1.5", "٣", "9000"])
def test_bad_cpu_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_regex_lists_every_cpu() -> None:
    assert cpu_list_regex(parse_cpu_list("4-7,12")) == "4|5|6|7|12"


def test_config_file_pinned_cpus_becomes_a_query_parameter(tmp_path: Path) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text("pinned_cpus: 4-7,12\n")
    params = query_params(load_file_config(path))
    assert (params["pinned_cpus"], params["pinned_cpu_count"]) == ("4|5|6|7|12", "5")
    path.write_text("pinned_cpus: 3\n")  # YAML reads a single id as an int
    params = query_params(load_file_config(path))
    assert (params["pinned_cpus"], params["pinned_cpu_count"]) == ("3", "1")
    assert set(query_params(FileConfig())) == {"process_groups"}


def test_process_groups_become_a_case_insensitive_promql_regex(tmp_path: Path) -> None:
    default = query_params(FileConfig())["process_groups"]
    assert default == "(?i).*(vllm|sglang|text\\\\-generation|tritonserver).*"  # `\-` inside a PromQL string
    path = tmp_path / "rca.yaml"
    path.write_text("process_groups: [my.engine, 'a\"b']\n")
    assert query_params(load_file_config(path))["process_groups"] == '(?i).*(my\\\\.engine|a\\"b).*'


@pytest.mark.parametrize("value", ["[]", "['']", "vllm"])
def test_bad_process_groups_are_a_config_error_naming_them(tmp_path: Path, value: str) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text(f"process_groups: {value}\n")
    with pytest.raises(ConfigError, match="process_groups"):
        load_file_config(path)


@pytest.mark.parametrize("value", ["'7-4'", "'four'", "''", "[4, 5]", "true"])
def test_bad_pinned_cpus_in_the_config_file_is_a_config_error_naming_it(tmp_path: Path, value: str) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text(f"pinned_cpus: {value}\n")
    with pytest.raises(ConfigError, match="pinned_cpus") as info:
        load_file_config(path)
    assert "\n" not in str(info.value)
