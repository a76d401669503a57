"""A new user's first hour, as the README tells it, on real parts: the quick start's demo, then
"Running it for real" step by step as written (the role and database, `rca migrate`, a write token,
`rca serve`, `rca worker`) against a real Prometheus, the README's Alertmanager receiver on a real
Alertmanager, the first real alert diagnosed and posted to Slack (bot token mode, the Slack fake),
the cause confirmed from Slack's button, and the incident page's links. Nothing on the way may
print a traceback or answer a broken link.

The README's text is read, not copied: a step added to it, renamed or reordered breaks this test
until the test runs it too. Only what cannot work on a test machine is replaced, each named below
(`LOCAL`): the example hosts (db, redis, prometheus) by loopback services, names by unique ones."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import httpx
import psycopg
import pytest
import yaml

from tests.e2e import promstack
from tests.e2e.scenarios import Exporter, Fleet, Host
from tests.fakes.slack import TOKEN as SLACK_TOKEN
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.e2e

README = promstack.REPO / "README.md"
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the shape of Slack's example signing secret
CHANNEL = "#llm-incidents"
SLACK_USER = {"id": "U0NEWUSER1", "username": "dana", "name": "dana", "team_id": "T0000TEST"}


def readme_section(heading: str) -> str:
    """The README's text under `## heading`, up to the next `## `."""
    text = README.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def shell_steps(block: str) -> list[str]:
    """The block's commands, a line each: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    steps = [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines()]
    return [step for step in steps if step and not step.startswith("#")]


class Links(HTMLParser):
    """Every href and src of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [value for name, value in attrs if name in ("href", "src") and value]


def signed(body: str, secret: str, when: int) -> dict[str, str]:
    """The headers Slack signs an interactivity request with (v0, HMAC-SHA256 of `v0:ts:body`)."""
    base = f"v0:{when}:{body}".encode()
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": str(when),
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def block_action(message: dict[str, Any], channel_id: str, element: dict[str, Any], block_id: str) -> dict[str, Any]:
    """A `block_actions` payload as Slack sends it when the user clicks `element` in `message`."""
    action = {
        "type": element["type"],
        "action_id": element["action_id"],
        "block_id": block_id,
        "text": element.get("text"),
        "value": element.get("value"),
        "action_ts": f"{time.time():.6f}",
    }
    return {
        "type": "block_actions",
        "user": SLACK_USER,
        "api_app_id": "A0000TEST",
        "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel_id, "is_ephemeral": False},
        "trigger_id": "1234567890.1234567890.abcdef",
        "team": {"id": "T0000TEST", "domain": "test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel_id, "name": CHANNEL.lstrip("#")},
        "message": message,
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T0000TEST/1/abcdef",
        "actions": [action],
    }


def button(message: dict[str, Any], starts: str) -> tuple[dict[str, Any], str]:
    """The message's button whose text starts with `starts`, and its block's id."""
    for block in message.get("blocks", []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("type") == "button" and element["text"]["text"].startswith(starts):
                return element, block["block_id"]
    raise AssertionError(f"no {starts!r} button in {json.dumps(message.get('blocks'))[:2000]}")


@pytest.fixture
def database_name() -> Iterator[str]:
    """A role and database name of this test's own, dropped afterwards (the README creates both)."""
    name = f"rca_newuser_{secrets.token_hex(4)}"
    yield name
    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def test_a_new_user_goes_from_the_readme_to_a_cause_confirmed_in_slack(
    tmp_path: Path, database_name: str, e2e_broker_url: str
) -> None:
    # 1. The quick start: its first command's demo, in a fresh data directory.
    quick = code_blocks(README.read_text(), "sh")[0]
    assert ".venv/bin/rca demo" in quick
    demo = subprocess.run(
        [sys.executable, "-m", "rca.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=promstack.rca_process_env({"RCA_DATA_DIR": str(tmp_path / "demo-data")}),
    )
    assert demo.returncode == 0 and "Traceback" not in demo.stdout + demo.stderr, demo.stdout + demo.stderr
    assert "Ranked root causes:" in demo.stdout and "/incidents/1" in demo.stdout

    # 2. "Running it for real", in the README's order.
    steps = shell_steps(code_blocks(readme_section("Running it for real"), "sh")[0])
    names = [step.split(" --")[0] if step.startswith("rca ") else step.split()[0] for step in steps]
    assert names == ["export", "createuser", "rca migrate", "rca token create", "rca serve", "rca worker"], steps
    exported = dict(item.split("=", 1) for item in shlex.split(steps[0])[1:])
    assert set(exported) == {
        "RCA_DATABASE_URL",
        "RCA_BROKER_URL",
        "RCA_PROMETHEUS_URL",
        "RCA_WEBHOOK_TOKEN",
        "RCA_API_TOKENS",
    }, exported

    now = time.time()
    fleet = Fleet(
        [Host("gpu-node-1", "kv_memory_pressure", now - 20 * 60), Host("gpu-node-2", None, now - 20 * 60)],
        start=now - 3 * 3600 - 15 * 60,
    )
    promstack.backfill(fleet, now, tmp_path / "tsdb", tmp_path)
    processes: list[promstack.Process] = []
    with FakeSlack() as slack, Exporter(fleet, time.time) as exporter:
        try:
            am_port, api_port = promstack.free_port(), promstack.free_port()
            prometheus, prometheus_url = promstack.start_prometheus(tmp_path, exporter.port, am_port)
            processes.append(prometheus)
            # LOCAL: the README's example hosts and names, as this machine has them.
            local = {
                "RCA_DATABASE_URL": re.sub(r"\brca\b", database_name, exported["RCA_DATABASE_URL"]).replace(
                    "@db/", "@127.0.0.1/"
                ),
                "RCA_BROKER_URL": e2e_broker_url,
                "RCA_PROMETHEUS_URL": prometheus_url,
                "RCA_WEBHOOK_TOKEN": secrets.token_urlsafe(16),
            }
            assert exported["RCA_DATABASE_URL"] == "postgresql://rca@db/rca", "the README's example changed: map it"
            env = exported | local
            env |= {  # LOCAL: free ports and a data directory of this test's own; Slack is the fake
                "RCA_PORT": str(api_port),
                "RCA_WORKER_METRICS_PORT": str(promstack.free_port()),
                "RCA_DATA_DIR": str(tmp_path / "rca-data"),
                "RCA_SLACK_BOT_TOKEN": SLACK_TOKEN,
                "RCA_SLACK_CHANNEL": CHANNEL,
                "RCA_SLACK_API_URL": slack.api_url,
                "RCA_SLACK_SIGNING_SECRET": SIGNING_SECRET,
                "RCA_PUBLIC_URL": f"http://127.0.0.1:{api_port}",  # docs/slack.md: the pages' address, for links
            }
            create = steps[1].replace("-h db", "-h 127.0.0.1")
            create = re.sub(r"\brca\b", database_name, create)
            done = subprocess.run(create, shell=True, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr

            def rca(step: str) -> subprocess.CompletedProcess[str]:
                ran = subprocess.run(
                    [sys.executable, "-m", "rca.cli", *shlex.split(step)[1:]],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    env=promstack.rca_process_env(env),
                )
                assert ran.returncode == 0, f"{step}: {ran.stdout}{ran.stderr}"
                assert "Traceback" not in ran.stdout + ran.stderr, ran.stderr
                return ran

            rca(steps[2])
            token = rca(steps[3]).stdout.strip()
            assert re.fullmatch(r"[\w-]{20,}", token), token
            serve = promstack.rca_process("rca-serve", shlex.split(steps[4])[1:], tmp_path, env)
            worker = promstack.rca_process("rca-worker", shlex.split(steps[5])[1:], tmp_path, env)
            processes += [serve, worker]
            api = f"http://127.0.0.1:{api_port}"
            promstack.wait_until(
                lambda: httpx.get(f"{api}/readyz", timeout=2).status_code == 200, 60, "rca serve", serve.proc
            )

            # 3. The README's Alertmanager receiver, its URL on this machine and its token in the file it names.
            [receiver] = yaml.safe_load(code_blocks(README.read_text(), "yaml")[0])["receivers"]
            webhook = receiver["webhook_configs"][0]
            token_file = tmp_path / "rca-webhook-token"
            token_file.write_text(env["RCA_WEBHOOK_TOKEN"])
            assert webhook["http_config"]["authorization"]["credentials_file"].endswith("rca-webhook-token")
            webhook["http_config"]["authorization"]["credentials_file"] = str(token_file)
            webhook["url"] = urljoin(api, urlsplit(webhook["url"]).path)  # LOCAL: the API's loopback port
            alertmanager, _ = promstack.alertmanager_for(tmp_path, receiver, port=am_port)
            processes.append(alertmanager)

            # 4. The first real alert: diagnosed, and posted to Slack with its buttons.
            auth = {"Authorization": f"Bearer {token}"}

            def diagnosed() -> dict[str, Any] | None:
                for item in httpx.get(f"{api}/api/v1/incidents", headers=auth, timeout=10).json()["items"]:
                    if "gpu-node-1" not in json.dumps(item):
                        continue
                    incident = httpx.get(f"{api}/api/v1/incidents/{item['id']}", headers=auth, timeout=10).json()
                    if (incident.get("investigation") or {}).get("status") == "done":
                        return incident
                return None

            found: list[dict[str, Any]] = []
            promstack.wait_until(lambda: bool(found.append(diagnosed()) or found[-1]), 180, "the first diagnosis")
            incident = found[-1]
            top = incident["investigation"]["hypotheses"][0]["category"]
            assert top == "kv_memory_pressure", incident["investigation"]["hypotheses"]
            page_url = f"{api}/incidents/{incident['id']}"

            def posted() -> tuple[str, str] | None:
                """The incident's message (its "Open page" button names its page): channel id and ts."""
                for post in slack.posts():
                    if f'"{page_url}"' in json.dumps(post.payload):
                        answer = json.loads(post.answer)
                        return answer["channel"], answer["ts"]
                return None

            promstack.wait_until(lambda: posted() is not None, 60, "the incident's Slack message")
            channel_id, ts = posted() or ("", "")
            message = slack.messages[(channel_id, ts)]
            assert not slack.problems, slack.problems

            # 5. The cause confirmed from Slack: the signed click, the feedback by the Slack user,
            #    the message updated in place.
            element, block_id = button(message, "Confirm")
            payload = block_action(message | {"ts": ts}, channel_id, element, block_id)
            body = urlencode({"payload": json.dumps(payload)})
            answer = httpx.post(
                f"{api}/slack/interactivity", content=body, headers=signed(body, SIGNING_SECRET, int(time.time()))
            )
            assert answer.status_code == 200, answer.text

            def confirmed() -> list[dict[str, Any]]:
                url = f"{api}/api/v1/incidents/{incident['id']}/feedback"
                return httpx.get(url, headers=auth, timeout=10).json()

            promstack.wait_until(lambda: bool(confirmed()), 30, "the feedback from Slack")
            [feedback] = confirmed()
            assert feedback["category"] == top and "dana" in feedback["author"], feedback
            promstack.wait_until(
                lambda: any(u.payload.get("ts") == ts for u in slack.updates()), 30, "the message updated in place"
            )
            assert "dana" in json.dumps(slack.messages[(channel_id, ts)]), "the message says who confirmed it"

            # 6. The incident page, signed in with the README's token: every link answers.
            with httpx.Client(base_url=api, timeout=10) as browser:
                form = browser.get("/signin").text
                csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
                signin = browser.post("/signin", data={"token": token, "csrf_token": csrf, "next": "/"})
                assert signin.status_code == 303, signin.text[:500]
                page = browser.get(f"/incidents/{incident['id']}")
                assert page.status_code == 200 and "kv_memory_pressure" in page.text
                links = Links()
                links.feed(page.text)
                checked = 0
                for link in dict.fromkeys(links.found):
                    url = urljoin(f"{api}/incidents/{incident['id']}", link)
                    if urlsplit(url).scheme not in ("http", "https") or url.split("#")[0] == page.url:
                        continue
                    host = urlsplit(url).hostname
                    assert host == "127.0.0.1", f"a link off this machine: {url}"
                    status = (
                        browser.get(url).status_code if url.startswith(api) else httpx.get(url, timeout=10).status_code
                    )
                    assert status < 400, f"{url} answered {status}"
                    checked += 1
                assert checked >= 5, links.found

            logs = "\n".join(process.tail(400) for process in (serve, worker))
            assert "Traceback" not in logs, logs
        finally:
            for process in reversed(processes):
                process.stop()
