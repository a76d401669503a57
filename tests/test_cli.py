"""The `rca` command line as a user meets it (the installed console script): the demo's diagnosis,
--version, help with defaults, one-line errors on every failure path and the exit codes (0
diagnosis, 1 failed while running, 2 usage, 3 no data), and logs of one short line per event."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import requests

from rca import cli
from rca.cli import EXIT_FAILED, EXIT_NO_DATA, EXIT_USAGE, logs, serve, supervisor, worker
from tests.fakes.html import PROXY_PAGE, HtmlServer
from tests.fakes.llm import FakeLLM, completion, error
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL
from tests.helpers.paths import VENV_BIN
from tests.helpers.processes import stop_process, subprocess_env

LABEL = ["--label", "instance=gpu-node-1:8000"]


def _rca(args: list[str], tmp_path: Path, timeout: float = 60, **rca: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(data_dir=str(tmp_path / "rca-data"), **rca)
    return subprocess.run(
        [str(VENV_BIN / "rca"), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def _one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The one line a failed command wrote on stderr, after checking its exit code and that it
    wrote nothing else there: no traceback, no log line, no page of a server."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "<" not in lines[0] and "Traceback" not in lines[0], lines[0]
    return lines[0]


def _closed_port() -> int:
    from tests.e2e.promstack import free_port

    return free_port()  # bound and released: nothing listens there


# --------------------------------------------------------------------------- demo


def test_demo_prints_the_diagnosis_of_the_recorded_incident_with_its_evidence(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _rca(["demo"], tmp_path, timeout=90)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert elapsed < 60, f"the demo took {elapsed:.0f} s"
    assert "Traceback" not in done.stderr
    assert "investigation done" in out
    assert "Incident 1: LLMRequestQueueMedianHigh" in out
    causes = out[out.index("Ranked root causes:") : out.index("Findings:")]
    top = causes.split("\n  2. ")[0]
    # The fault the recording's fleet carried, ranked first by the real ranking on replayed series.
    assert re.search(r"1\. kv_memory_pressure  confidence 0\.\d\d", top), causes
    assert re.search(r"\+ kv_cache_usage +KV-cache usage is \d+% \(baseline \d+%, limit > \d+%\) since", top)
    assert re.search(r"\+ preemption_rate +Preemptions per second is", top)
    assert "next steps:" in top
    findings = out[out.index("Findings:") :]
    assert re.search(r"\[!!\] kv_cache_usage +\d+% \(baseline \d+%, limit > \d+%\)", findings)
    assert "KV-cache usage is" not in findings, "each finding once: its numbers, not its sentence saying them again"
    assert re.search(r"\[ok\] request_rate +[\d.]+/s \(baseline [\d.]+/s, limit > [\d.]+/s\)", findings)
    assert findings.index("[!!]") < findings.index("[ok]") < findings.index("[--]")
    assert "data unavailable" not in findings.split("[--]")[0], "measured findings first"
    assert "Note:" not in out, "every query the collection made is in the recording"
    assert "\nWritten by the rules (no LLM configured)\n" in out
    assert "/api/v1/incidents/1" in out and "/docs" in out and "Authorization: Bearer" in out
    assert "\033[" not in out, "no colour when stdout is not a terminal"


def test_demo_serve_keeps_the_printed_api_calls_working(tmp_path: Path) -> None:
    # A broker in the environment must not take the demo off its in-process queue.
    env = subprocess_env(data_dir=str(tmp_path / "rca-data"), broker_url="redis://127.0.0.1:1/0") | {
        "PYTHONUNBUFFERED": "1"
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "rca.cli", "demo", "--serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while not any("the whole API:" in line for line in lines):
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        text = "".join(lines)
        token = re.search(r"Bearer ([\w-]+)'", text).group(1)
        url = re.search(r"(http://127\.0\.0\.1:\d+/api/v1/incidents/1)\n", text).group(1)
        incident = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        assert incident["investigation"]["hypotheses"][0]["category"] in text
        by_cause = re.search(r"'(http://[^']+category=\w+)'", text).group(1)
        page = httpx.get(by_cause, headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        assert [item["id"] for item in page["items"]] == [1]
        proc.send_signal(signal.SIGINT)
        # Its server thread is given 10 s to finish, then the dispatcher its running work: on a busy
        # CI machine, after the whole suite, that took over 20 s (tests/test_cli.py alone: 5 s).
        assert proc.wait(timeout=60) == 0
    finally:
        stop_process(proc)


def _serve_demo(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    """`rca demo --serve` on tmp_path's data directory, and what it printed up to its API's address."""
    env = subprocess_env(data_dir=str(tmp_path / "rca-data")) | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rca.cli", "demo", "--serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while not any("the whole API:" in line for line in lines):
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            stop_process(proc)
            raise AssertionError("".join(lines))
        lines.append(line)
    return proc, "".join(lines)


def test_a_second_demo_investigates_its_one_incident_again_and_every_link_on_its_page_answers(
    tmp_path: Path,
) -> None:
    first = _rca(["demo"], tmp_path, timeout=90)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Incident 1: LLMRequestQueueMedianHigh" in first.stdout
    proc, text = _serve_demo(tmp_path)
    try:
        assert "Incident 1 is open since an earlier run: investigating it again (investigation 2)" in text, text
        assert "Incident 1: LLMRequestQueueMedianHigh" in text and "1. kv_memory_pressure" in text
        token = re.search(r"Bearer ([\w-]+)'", text).group(1)
        base = re.search(r"the whole API: (http://127\.0\.0\.1:\d+)/docs", text).group(1)
        auth = {"Authorization": f"Bearer {token}"}
        incidents = httpx.get(f"{base}/api/v1/incidents", headers=auth, timeout=10).json()
        assert [(i["id"], i["status"]) for i in incidents["items"]] == [(1, "firing")], "one demo incident, not two"
        incident = httpx.get(f"{base}/api/v1/incidents/1", headers=auth, timeout=10).json()
        assert incident["investigation"]["id"] == 2 and incident["investigation"]["reason"] == "rerun"
        assert incident["investigation"]["status"] == "done"
        assert incident["external_url"] is None and [a["generator_url"] for a in incident["alerts"]] == [None]
        similar = httpx.get(f"{base}/api/v1/incidents/1/similar", headers=auth, timeout=10).json()
        assert similar["items"] == [], "an earlier run of the demo is not history"

        with httpx.Client(base_url=base, timeout=10) as browser:
            form = browser.get("/signin").text
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
            signed = browser.post("/signin", data={"token": token, "csrf_token": csrf, "next": "/incidents/1"})
            page = browser.get("/incidents/1")
        assert signed.status_code == 303 and page.status_code == 200 and "kv_memory_pressure" in page.text
        assert ".example" not in page.text
        links = sorted(set(re.findall(r'href="(https?://[^"]+)"', page.text)))
        graphs = [link for link in links if "/graph?" in link]
        assert len(graphs) >= 20, links  # a "Prometheus" link for each measured finding, its chart's too
        assert all(not link.startswith(base) for link in graphs), "the graph links go to the replay"
        drawn = 0
        for link in links:
            reply = httpx.get(link.replace("&amp;", "&"), timeout=10)
            assert reply.status_code == 200, (link, reply.status_code, reply.text[:200])
            drawn += "<polyline" in reply.text
        kv = next(link for link in graphs if "vllm%3Akv_cache_usage_perc" in link)
        kv_page = httpx.get(kv.replace("&amp;", "&"), timeout=10).text
        assert "vllm:kv_cache_usage_perc" in kv_page and "<polyline" in kv_page and "max 0.9" in kv_page
        # Each draws its recorded series, but the SLO model's query (the recording holds its parts).
        assert drawn >= len(graphs) - 1, (drawn, len(graphs))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        stop_process(proc)


# --------------------------------------------------------------------------- investigate


def test_bad_start_is_one_line_naming_the_format(tmp_path: Path) -> None:
    done = _rca(["investigate", *LABEL, "--start", "yesterday 9am"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--start 'yesterday 9am'" in done.stderr and "ISO 8601" in done.stderr
    assert "2026-12-03T08:40:00Z" in done.stderr


def test_without_prometheus_the_answer_is_no_data_not_a_confidence(tmp_path: Path) -> None:
    done = _rca(["investigate", *LABEL], tmp_path)
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr == "no data for host=gpu-node-1: no Prometheus configured (set RCA_PROMETHEUS_URL)\n"
    assert "no_clear_cause" not in done.stderr and "0.40" not in done.stderr


def test_unreachable_prometheus_is_one_line_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    done = _rca(["investigate", *LABEL], tmp_path, prometheus_url=url)
    assert done.returncode == 3
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("no data for ") and f"Prometheus at {url} is unavailable" in line
    assert "check RCA_PROMETHEUS_URL" in line


def test_a_server_that_is_not_prometheus_is_quoted_by_its_page_title_never_its_html(tmp_path: Path) -> None:
    with HtmlServer(502) as proxy:
        done = _rca(["investigate", *LABEL], tmp_path, prometheus_url=proxy.url)
    line = _one_line(done, EXIT_NO_DATA)
    assert done.stdout == ""
    assert f"Prometheus at {proxy.url} is unavailable: HTTP 502: an HTML page: 502 Bad Gateway" in line


@pytest.mark.parametrize("extra", [LABEL, ["--start", "2026-12-03T08:40:00Z"]])
def test_a_payload_file_with_label_or_start_is_refused_not_ignored(tmp_path: Path, extra: list[str]) -> None:
    payload = Path(__file__).parents[1] / "rca" / "samples" / "demo_alert.json"
    line = _one_line(_rca(["investigate", str(payload), *extra], tmp_path), EXIT_USAGE)
    assert line.startswith(f"error: {extra[0]}: not with a payload file ({payload})"), line


def test_json_output_keeps_its_shape_when_there_is_no_data(tmp_path: Path) -> None:
    done = _rca(["investigate", *LABEL, "--json"], tmp_path)
    assert done.returncode == 3
    out = json.loads(done.stdout)
    assert set(out) == {
        "target",
        "selectors",
        "window",
        "collect_seconds",
        "findings",
        "hypotheses",
        "analyst",
        "written_by",
        "error",
        "data_gap",
        "inconclusive_reason",
    }
    assert all(f["status"] in ("unavailable", "not_measurable") for f in out["findings"])
    # The document says it judged nothing (issue 16.8), and ranks no cause (issue 32.1): nobody wrote one.
    assert out["hypotheses"] == [] and out["analyst"] is None and out["written_by"] is None
    assert out["error"] == "no Prometheus configured (set RCA_PROMETHEUS_URL)"
    assert out["inconclusive_reason"] == "no_prometheus"
    assert out["data_gap"] == (
        "Could not investigate: no Prometheus configured (set RCA_PROMETHEUS_URL), so no metrics were read; "
        "this is not a healthy verdict"
    )


def test_a_rules_fallback_is_named_as_such_on_the_terminal_and_in_json(
    tmp_path: Path, prometheus: StubPrometheus
) -> None:
    """Issue 16.8: the terminal says who really wrote the answer, as the Slack message does."""
    overloaded = error(503, "The engine is currently overloaded, please try again later", "server_error")
    with FakeLLM(lambda request: overloaded) as llm:
        rca = {"prometheus_url": prometheus.url, "llm_base_url": llm.base_url, "llm_model": "fake-model"}
        text = _rca(["investigate", *LABEL], tmp_path, llm_max_retries="0", **rca)
        as_json = _rca(["investigate", *LABEL, "--json"], tmp_path, llm_max_retries="0", **rca)
    assert text.returncode == 0, text.stderr
    said = "Written by the rules fallback: the answer of model fake-model was not used (LLM unavailable: HTTP 503"
    assert said in text.stdout and "Written by model" not in text.stdout
    out = json.loads(as_json.stdout)
    assert out["written_by"].startswith(said) and out["analyst"]["analyst"] == "rules"
    assert out["error"] is None


def test_the_llm_clients_request_lines_stay_out_of_the_log_at_info(tmp_path: Path, prometheus: StubPrometheus) -> None:
    """Issue 16.10: the openai client's HTTP library (httpx2, not httpx) logged every request's URL
    at INFO. The service's own INFO lines still show."""
    with FakeLLM(lambda request: completion("no idea")) as llm:
        rca = {"prometheus_url": prometheus.url, "llm_base_url": llm.base_url, "llm_model": "fake-model"}
        done = _rca(["investigate", *LABEL], tmp_path, log_level="INFO", **rca)
    assert done.returncode == 0, done.stderr
    assert len(llm.requests) == 2  # the answer and its repair were sent
    assert "/chat/completions" not in done.stderr and "HTTP Request" not in done.stderr, done.stderr
    assert " INFO rca." in done.stderr or " WARNING rca." in done.stderr, "the service's own log is still there"


# --------------------------------------------------------------------------- backtest


def test_backtest_store_without_a_database_is_one_line_before_any_replay(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"  # never asked: the database is checked first
    done = _rca(
        ["backtest", "--since", "7d", "--store"], tmp_path, prometheus_url=url, database_url=CLOSED_PORT_DATABASE_URL
    )
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: RCA_DATABASE_URL: cannot connect (") and "is the database running?" in line


def test_backtest_against_an_unreachable_prometheus_fails_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    done = _rca(["backtest", "--since", "10m"], tmp_path, prometheus_url=url)
    line = _one_line(done, EXIT_FAILED)
    assert (
        line == f"error: Prometheus at {url} is unavailable: connection refused (nothing listening)"
        " (check RCA_PROMETHEUS_URL)"
    )
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("status", "page", "said"),
    [
        (502, PROXY_PAGE, "HTTP 502: an HTML page: 502 Bad Gateway"),
        (
            200,
            "<html><head><title>Sign in</title></head><body>...</body></html>",
            "the answer is not JSON: an HTML page: Sign in",
        ),
    ],
)
def test_backtest_against_a_server_that_is_not_prometheus_quotes_it_in_one_line(
    tmp_path: Path, status: int, page: str, said: str
) -> None:
    with HtmlServer(status, page) as server:
        done = _rca(["backtest", "--since", "10m"], tmp_path, prometheus_url=server.url)
    line = _one_line(done, EXIT_FAILED)
    assert line == f"error: Prometheus at {server.url} is unavailable: {said} (check RCA_PROMETHEUS_URL)"


def test_backtest_on_a_prometheus_without_serving_series_is_no_data(tmp_path: Path, empty_prometheus: str) -> None:
    done = _rca(["backtest", "--since", "10m"], tmp_path, prometheus_url=empty_prometheus)
    line = _one_line(done, EXIT_NO_DATA)
    assert done.stdout == ""
    assert line.startswith(f"no data: Prometheus at {empty_prometheus} has no serving target from "), line
    assert "vllm:num_requests_waiting" in line
    one = _rca(
        ["backtest", "--since", "10m", "--target", "gpu-1:8000", "--json"], tmp_path, prometheus_url=empty_prometheus
    )
    line = _one_line(one, EXIT_NO_DATA)
    assert line.startswith(f"no data: gpu-1:8000 is not a serving target of Prometheus at {empty_prometheus} from ")
    summary = json.loads(one.stdout)  # --json prints the same document either way
    assert summary["targets"] == 0 and summary["scans"] > 0 and summary["breaches"] == []


# --------------------------------------------------------------------------- help and version


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_the_installed_package_version(tmp_path: Path, flag: str) -> None:
    done = _rca([flag], tmp_path)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == f"rca {version('llm-serving-rca')}\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "error: rca: the following arguments are required: COMMAND (see `rca --help`)"),
        (["backtest", "--since", "7x"], "error: rca backtest: argument --since: '7x' is not a duration like 90m"),
        (["token", "create"], "error: rca token create: the following arguments are required: --name"),
    ],
)
def test_usage_errors_are_one_line_naming_the_help(tmp_path: Path, args: list[str], said: str) -> None:
    assert _one_line(_rca(args, tmp_path), EXIT_USAGE).startswith(said)


def _subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (nested) subcommand by its full name, e.g. `token create`."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found |= _subparsers(sub, f"{prefix}{name} ")
    return found


def test_every_command_has_a_description_and_every_option_help_with_its_default() -> None:
    parser = cli.build_parser()
    assert "exit codes:" in parser.format_help()
    for code in ("0", "2", "3"):
        assert re.search(rf"^  {code}  ", parser.format_help(), re.M)
    commands = _subparsers(parser)
    assert {
        "serve",
        "worker",
        "beat",
        "migrate",
        "investigate",
        "backtest",
        "demo",
        "gpu-probe",
        "investigate-again",
        "token",
        "token create",
        "token revoke",
    } <= set(commands)
    for name, sub in commands.items():
        assert sub.description, f"{name}: no description"
        text = " ".join(sub.format_help().split())
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{name} {action.dest}: no help"
            default = action.default
            if default not in (None, False, []) and action.option_strings:
                assert f"(default: {default})" in text or "default" in action.help, f"{name} {action.dest}"
    demo = " ".join(commands["demo"].format_help().split())
    assert "(default: 0)" in demo
    assert "(default: 2)" in " ".join(commands["worker"].format_help().split())


def test_the_worker_names_each_consumer_after_its_own_node_name() -> None:
    assert worker.consumer_hostname("rca@host-1", "investigations", "investigations") == "rca@host-1"
    assert worker.consumer_hostname("rca@host-1", "slack", "investigations") == "rca-slack@host-1"


def test_the_worker_stops_its_other_children_when_one_exits() -> None:
    """`rca worker` supervises its consumers and scheduler: one failing stops the rest and the
    worker exits non-zero, for compose or Kubernetes to restart it whole."""
    import signal
    import sys
    import time

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        status = supervisor.supervise(
            {
                "exits": [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"],
                "runs": [sys.executable, "-c", "import time; time.sleep(60)"],
            }
        )
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert status == EXIT_FAILED
    assert time.monotonic() - started < 15


def test_the_worker_starts_again_a_child_that_shut_down_cleanly_on_its_own(tmp_path: Path) -> None:
    """A consumer that shuts down cleanly unasked (Celery's, when its broker vanishes at the wrong
    moment) is started again, and the rest keep running; a failure then stops them all."""
    import signal
    import sys

    starts = tmp_path / "starts"
    child = (
        "import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); n = len(p.read_text()) if p.exists() else 0; "
        "p.write_text('x' * (n + 1)); time.sleep(0.5); raise SystemExit(0 if n == 0 else 3)"
    )
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = supervisor.supervise(
            {
                "flaky": [sys.executable, "-c", child, str(starts)],
                "runs": [sys.executable, "-c", "import time; time.sleep(60)"],
            }
        )
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert starts.read_text() == "xx"  # started again after its clean exit, stopped all on its failure
    assert status == EXIT_FAILED


# --------------------------------------------------------------------------- failure paths


AUTH = {"webhook_token": "t", "api_tokens": "a"}


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["serve"], AUTH),
        (["worker"], {"broker_url": "redis://127.0.0.1:1/0", "worker_metrics_port": "0"}),
        (["beat"], {"broker_url": "redis://127.0.0.1:1/0"}),
        (["migrate"], {}),
        (["token", "create", "--name", "ci"], {}),
        (["token", "revoke", "--name", "ci"], {}),
        (["investigate-again", "1"], {}),
        (["demo"], {}),
    ],
)
def test_every_command_says_an_unreachable_database_in_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    done = _rca(args, tmp_path, database_url=CLOSED_PORT_DATABASE_URL, **env)
    line = _one_line(done, EXIT_USAGE)
    assert line.startswith("error: RCA_DATABASE_URL: cannot connect (") and "is the database running?" in line


def test_migrate_to_an_unknown_revision_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_rca(["migrate", "0999"], tmp_path), EXIT_USAGE)
    assert line == "error: revision '0999': Can't locate revision identified by '0999'"


@pytest.mark.parametrize(("args", "env"), [(["serve"], AUTH), (["demo"], {})])
def test_a_port_in_use_is_one_line_not_the_servers_exit_status(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """uvicorn logs the bind error and exits 3, which means "no data" here."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _rca([*args, "--port", str(port)], tmp_path, **env)
    line = _one_line(done, EXIT_USAGE)
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{port}: Address already in use"), line


def test_alembic_says_nothing_outside_migrate(tmp_path: Path) -> None:
    """The embedded SQLite migrates itself on the first `token create`: its steps and migration
    context stay out of the output; `rca migrate` shows the steps it runs, nothing else."""
    created = _rca(["token", "create", "--name", "ci"], tmp_path)
    assert created.returncode == 0, created.stderr
    assert created.stderr == "token 'ci' (read) created; it is shown only now\n"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    migrated = _rca(["migrate"], fresh)
    assert migrated.returncode == 0, migrated.stderr
    logged = migrated.stderr.splitlines()
    assert logged and all(" INFO alembic.runtime.migration: Running upgrade " in line for line in logged), logged


# --------------------------------------------------------------------------- logs


def test_a_retried_request_is_one_short_line_with_its_promql_cut(caplog: pytest.LogCaptureFixture) -> None:
    from datetime import UTC, datetime

    from rca.collect.prometheus import PrometheusSource

    logs.quiet_library_loggers()
    caplog.set_level(logging.WARNING, logger="urllib3.connectionpool")
    promql = 'sum by (instance) (rate(vllm:request_success_total{instance=~"gpu-node-1:8000|gpu-node-1"}[5m]))'
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(requests.ConnectionError):
        PrometheusSource(url, timeout=5, concurrency=1)._instant(promql, datetime.now(UTC))
    [retried] = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
    shown = promql[: logs.PROMQL_SHOWN - 1] + "…"
    assert retried.startswith(f"retrying /api/v1/query ({shown}) after NewConnectionError: "), retried
    assert retried.endswith("Connection refused") and "\n" not in retried and "%28" not in retried


def test_the_services_log_says_a_prometheus_outage_in_short_lines(tmp_path: Path) -> None:
    """`rca serve` scanning an unreachable Prometheus: urllib3's retry, the rules and the failed
    scan each in one line, without the URL-encoded PromQL; no alembic line at start-up."""
    from tests.e2e.promstack import free_port
    from tests.helpers.processes import wait_until_serving

    port = free_port()
    env = subprocess_env(
        data_dir=str(tmp_path / "rca-data"), prometheus_url=f"http://127.0.0.1:{_closed_port()}", **AUTH
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [str(VENV_BIN / "rca"), "serve", "--port", str(port)], cwd=tmp_path, env=env, stdout=sink, stderr=sink
        )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", server)
        deadline = time.monotonic() + 30
        while "scan failed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_process(server)
    lines = log.read_text().splitlines()
    assert any(
        "WARNING rca.jobs.scan: scan failed: ConnectionError: connection refused (nothing listening)" in line
        for line in lines
    ), lines
    retries = [line for line in lines if "urllib3.connectionpool" in line]
    assert retries and all(" retrying /api/v1/" in line and len(line) < 400 for line in retries), retries
    assert not any("%28" in line or "Retry(total" in line or "alembic" in line for line in lines), lines


# --------------------------------------------------------------------------- serve


def test_serve_runs_one_process_per_cpu_with_a_broker_and_one_with_the_embedded_queue(tmp_path: Path) -> None:
    from rca.config import load_settings

    with_broker = load_settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:6379/0")
    assert serve.default_serve_workers(with_broker) == serve.usable_cpus() <= len(os.sched_getaffinity(0))
    assert serve.default_serve_workers(load_settings(data_dir=tmp_path)) == 1
    refused = _rca(["serve", "--workers", "2"], tmp_path, webhook_token="t", api_tokens="a")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        "error: --workers: more than 1 needs RCA_BROKER_URL (the embedded queue runs inside the one server process)"
    ]


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_and_worker_warn_once_at_start_when_prometheus_is_unset_or_unreachable(
    command: str,
    pg_db: str,
    redis_url: str,
    tmp_path: Path,
    prometheus: StubPrometheus,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 32.1: neither said that every investigation would be blind. They start all the same
    (alerts are still taken and kept); the processes they would run are left out here."""
    import logging

    import uvicorn

    from rca.config import load_settings

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    monkeypatch.setattr(worker, "supervise", lambda children: cli.EXIT_OK)
    closed = f"http://127.0.0.1:{_closed_port()}"
    expected = {
        None: "RCA_PROMETHEUS_URL: not set; investigations read no metrics and end inconclusive",
        closed: f"RCA_PROMETHEUS_URL: Prometheus at {closed} is unreachable (connection refused (nothing listening)); "
        "investigations end inconclusive, with no cause, until it answers",
        prometheus.url: None,
    }
    for url, warning in expected.items():
        settings = load_settings(
            database_url=pg_db,
            broker_url=redis_url,
            webhook_token="w",
            api_tokens="a",
            data_dir=tmp_path / "rca-data",
            prometheus_url=url,
            worker_metrics_port=0,
            scan_enabled=False,
        )
        serve_args = ["--workers", "1", "--port", str(_closed_port())]  # a free port: serve checks it first
        args = cli.build_parser().parse_args([command, *serve_args] if command == "serve" else [command])
        caplog.clear()
        with caplog.at_level(logging.WARNING), contextlib.suppress(SystemExit):
            args.func(settings, args)
        warned = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
        if warning is None:
            assert warned == [], warned
        else:
            assert len(warned) == 1 and warned[0].startswith(warning), warned


@pytest.mark.parametrize(
    ("healthcheck", "killed"), [("5", True), (None, False)], ids=["uvicorn-5s-kills-it", "default-keeps-it"]
)
def test_a_server_process_starved_while_it_starts_is_not_killed(
    tmp_path: Path, pg_db: str, redis_url: str, healthcheck: str | None, killed: bool
) -> None:
    """`rca serve --workers 2` on a host too loaded to schedule its children: each is stopped
    (SIGSTOP) as soon as it exists, for longer than uvicorn's 5 s health check, then let go. With
    that 5 s (what `rca serve` used), the supervisor kills and replaces them: the failure seen on
    loaded hosts; with the default RCA_SERVE_WORKER_HEALTHCHECK_SECONDS they start and serve."""
    from tests.e2e.promstack import free_port
    from tests.helpers.processes import child_pids, wait_until_serving

    port = free_port()
    settings = {
        "database_url": pg_db,
        "broker_url": redis_url,
        "data_dir": str(tmp_path / "data"),
        "webhook_allow_unauthenticated": "true",
        "api_allow_unauthenticated": "true",
    }
    if healthcheck:
        settings["serve_worker_healthcheck_seconds"] = healthcheck
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "rca.cli", "serve", "--port", str(port), "--workers", "2"],
            cwd=tmp_path,
            env=subprocess_env(**settings),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        stopped: set[int] = set()
        deadline = time.monotonic() + 60
        while len(stopped) < 2 and time.monotonic() < deadline and server.poll() is None:
            for pid in set(child_pids(server.pid)) - stopped:
                if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text():
                    os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
            time.sleep(0.01)
        assert len(stopped) == 2, log.read_text()
        time.sleep(8)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        wait_until_serving(f"http://127.0.0.1:{port}", server)
        serving = {pid for pid in child_pids(server.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()}
    finally:
        stop_process(server)
    output = log.read_text()
    if killed:  # the supervisor pings one child at a time: the first is killed, then the second may answer
        assert serving != stopped and "Child process" in output and "died" in output, output
    else:
        assert serving == stopped and "died" not in output, output


def test_serve_with_two_workers_stores_every_notification_and_counts_them_all_in_metrics(
    tmp_path: Path, pg_db: str, redis_url: str
) -> None:
    """`rca serve --workers 2`: two processes share the port; each request is stored whichever
    answers it, and /metrics, answered by either, sums both processes' counters."""
    from tests.e2e.promstack import free_port
    from tests.helpers.databases import count_rows
    from tests.helpers.payloads import make_alert, make_payload
    from tests.helpers.processes import child_pids, wait_until_serving
    from tests.helpers.service import API_AUTH, API_TOKEN, WEBHOOK_AUTH, WEBHOOK_TOKEN

    port = free_port()
    env = subprocess_env(
        database_url=pg_db,
        broker_url=redis_url,
        webhook_token=WEBHOOK_TOKEN,
        api_tokens=API_TOKEN,
        data_dir=str(tmp_path / "rca-data"),
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "rca.cli", "serve", "--port", str(port), "--workers", "2"],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, server)
        sent = 20
        for n in range(sent):  # a connection each, so that the kernel deals them to both processes
            payload = make_payload(f'{{}}:{{alertname="QueueHigh",n="{n}"}}', alerts=[make_alert(f"fp-{n}")])
            reply = httpx.post(f"{base}/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH, timeout=30)
            assert reply.status_code == 200, reply.text
        workers = [pid for pid in child_pids(server.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
        scraped = httpx.get(f"{base}/metrics", headers=API_AUTH, timeout=10).text
    finally:
        stop_process(server)
    assert len(workers) == 2, log.read_text()
    answered = re.findall(r'^rca_webhook_requests_total\{code="200",outcome="stored"\} (\S+)$', scraped, re.M)
    assert [float(value) for value in answered] == [sent], scraped
    assert count_rows(pg_db)["notifications"] == sent


# --------------------------------------------------------------------------- investigate-again


def _stored_incident(url: str, group: str, status: str = "done") -> tuple[int, int]:
    """An incident stored as the webhook stores it, its investigation set to `status`: their ids."""
    from rca.intake.schema import WebhookPayload
    from rca.intake.service import record_notification
    from rca.store.db import session_scope
    from rca.store.models import InvestigationRow
    from tests.helpers.payloads import make_alert, make_payload

    payload = make_payload(group, alerts=[make_alert(f"fp-{group}")])
    with session_scope(url) as session:
        result = record_notification(session, WebhookPayload.model_validate(payload), payload)
        assert result.investigation_id is not None
        session.get_one(InvestigationRow, result.investigation_id).status = status
    return result.incident_id, result.investigation_id


def _investigations(url: str, incident_id: int) -> list[tuple[int, str, str, str | None]]:
    from sqlalchemy import select

    from rca.store.db import session_scope
    from rca.store.models import InvestigationRow

    with session_scope(url) as session:
        rows = session.execute(
            select(InvestigationRow.id, InvestigationRow.status, InvestigationRow.reason, InvestigationRow.requested_by)
            .where(InvestigationRow.incident_id == incident_id)
            .order_by(InvestigationRow.id)
        ).all()
    return [(row.id, row.status, row.reason, row.requested_by) for row in rows]


def test_investigate_again_queues_one_for_the_serving_process_and_names_the_one_waiting(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 32.2 from the command line, on each backend and without a broker: queued in the
    database for `rca serve`'s sweep to start; asked again, the waiting one is named, not another."""
    incident_id, first = _stored_incident(db_url, "cli-again")
    done = _rca(["investigate-again", str(incident_id), "--by", "alice"], tmp_path, database_url=db_url)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    [(_, _, _, _), (new, status, reason, by)] = _investigations(db_url, incident_id)
    assert (status, reason, by) == ("queued", "requested", "alice")
    assert done.stdout == (
        f"investigation {new} of incident {incident_id} queued; the running `rca serve` starts it within about 75 s"
        " (its sweep)\n"
    )
    repeated = _rca(["investigate-again", str(incident_id)], tmp_path, database_url=db_url)
    assert repeated.returncode == 0 and repeated.stderr == ""
    assert repeated.stdout == f"investigation {new} of incident {incident_id} is already queued; no other queued\n"
    assert [row[0] for row in _investigations(db_url, incident_id)] == [first, new]


def test_investigate_again_sends_a_new_one_to_the_broker(pg_db: str, redis_url: str, tmp_path: Path) -> None:
    from rca.jobs.backlog import held_investigations
    from rca.jobs.celery_app import INVESTIGATE, INVESTIGATIONS_QUEUE, create_app
    from tests.helpers.service import make_settings

    incident_id, _ = _stored_incident(pg_db, "cli-broker")
    done = _rca(["investigate-again", str(incident_id)], tmp_path, database_url=pg_db, broker_url=redis_url)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    new = _investigations(pg_db, incident_id)[-1]
    assert new[1:] == ("queued", "requested", "cli")
    assert done.stdout == f"investigation {new[0]} of incident {incident_id} queued (sent to RCA_BROKER_URL)\n"
    app = create_app(make_settings(pg_db, tmp_path, broker_url=redis_url))
    try:
        held = held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE)
    finally:
        app.close()
    assert held is not None and new[0] in held


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["999999"], EXIT_FAILED, "error: no incident 999999"),
        (["0"], EXIT_USAGE, "error: INCIDENT_ID: 0 is not an incident id (1 to 2147483647)"),
        (["seven"], EXIT_USAGE, "error: rca investigate-again: argument INCIDENT_ID: invalid int value: 'seven'"),
        (["1", "--by", " "], EXIT_USAGE, "error: --by: give 1 to 128 characters"),
    ],
)
def test_investigate_again_errors_are_one_line_with_their_exit_code(
    pg_db: str, tmp_path: Path, args: list[str], code: int, said: str
) -> None:
    line = _one_line(_rca(["investigate-again", *args], tmp_path, database_url=pg_db), code)
    assert line.startswith(said), line
