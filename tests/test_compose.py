"""docker-compose.yml and the Dockerfile describe a stack the code can actually run: the
services, their order, real `rca` commands, and only settings that `rca.config.Settings` knows."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from rca.cli import build_parser
from rca.config import Settings, load_settings
from tests.conftest import REPO

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
RCA_NAME = re.compile(r"\bRCA_[A-Z0-9_]+\b")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    return command.split() if isinstance(command, str) else list(command or [])


def environment_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def resolve(value: str) -> str:
    """Compose interpolation as `docker compose config` would do with the required variables set."""
    def one(match: re.Match[str]) -> str:
        op, arg = match["op"], match["arg"]
        if op in (":-", "-"):
            return arg
        return f"value-of-{match['name'].lower()}"
    return INTERPOLATION.sub(one, value)


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def test_compose_defines_the_five_services(compose: dict[str, Any]) -> None:
    assert set(services(compose)) == {"api", "worker", "migrate", "postgres", "redis"}
    assert services(compose)["postgres"]["image"] == "postgres:16"
    assert services(compose)["redis"]["image"] == "redis:7"
    for name in ("api", "worker", "migrate"):
        assert services(compose)[name]["build"] in (".", {"context": "."}), name


@pytest.mark.parametrize(("name", "subcommand"), [("api", "serve"), ("worker", "worker"), ("migrate", "migrate")])
def test_each_service_runs_a_real_rca_command(compose: dict[str, Any], name: str, subcommand: str) -> None:
    command = command_of(services(compose)[name])
    assert command[:2] == ["rca", subcommand], command
    args = build_parser().parse_args(command[1:])  # the flags exist, or argparse exits
    assert args.command == subcommand


@pytest.mark.parametrize("name", ["api", "worker"])
def test_api_and_worker_wait_for_postgres_redis_and_the_migration(compose: dict[str, Any], name: str) -> None:
    deps = depends_on(services(compose)[name])
    assert deps.get("postgres") == "service_healthy"
    assert deps.get("redis") == "service_healthy"
    assert deps.get("migrate") == "service_completed_successfully"


def test_migration_waits_for_a_healthy_postgres(compose: dict[str, Any]) -> None:
    assert depends_on(services(compose)["migrate"]).get("postgres") == "service_healthy"
    assert services(compose)["migrate"].get("restart") in (None, "no")


@pytest.mark.parametrize("name", ["postgres", "redis", "api", "worker"])
def test_long_running_services_have_healthchecks(compose: dict[str, Any], name: str) -> None:
    check = services(compose)[name].get("healthcheck")
    assert check and check.get("test"), f"{name} has no healthcheck"


def test_api_healthcheck_probes_readyz_on_the_port_it_serves(compose: dict[str, Any]) -> None:
    api = services(compose)["api"]
    port = environment_of(api)["RCA_PORT"]
    assert " ".join(api["healthcheck"]["test"]).count(f"127.0.0.1:{port}/readyz") == 1
    assert environment_of(api)["RCA_HOST"] == "0.0.0.0"
    assert any(str(mapping).endswith(f":{port}") for mapping in api["ports"])


@pytest.mark.parametrize("name", ["api", "worker", "migrate"])
def test_rca_services_get_the_required_settings(compose: dict[str, Any], name: str) -> None:
    env = environment_of(services(compose)[name])
    for setting in ("RCA_DATABASE_URL", "RCA_BROKER_URL", "RCA_PROMETHEUS_URL", "RCA_WEBHOOK_TOKEN",
                    "RCA_API_TOKENS"):
        assert setting in env, f"{name} lacks {setting}"
    assert "@postgres:5432/" in env["RCA_DATABASE_URL"]
    assert env["RCA_BROKER_URL"].startswith("redis://redis:6379/")


def test_every_rca_variable_in_compose_is_a_setting(compose: dict[str, Any]) -> None:
    fields = {f"RCA_{name.upper()}" for name in Settings.model_fields}
    used = set(RCA_NAME.findall(COMPOSE.read_text()))
    for service in services(compose).values():
        used |= {name for name in environment_of(service) if name.startswith("RCA_")}
    assert used, "the compose file sets no RCA_* variables"
    assert used - fields == set(), f"not settings: {sorted(used - fields)}"


@pytest.mark.parametrize("name", ["api", "worker", "migrate"])
def test_compose_settings_pass_the_services_own_validation(compose: dict[str, Any], name: str) -> None:
    env = {k: resolve(v) for k, v in environment_of(services(compose)[name]).items()}
    overrides = {k.removeprefix("RCA_").lower(): v for k, v in env.items()}
    settings = load_settings(**overrides)  # raises ConfigError naming a bad one
    assert settings.database_url and settings.database_url.startswith("postgresql+psycopg://")
    assert not settings.embedded_queue
    assert settings.webhook_token is not None and settings.api_tokens


def test_dockerfile_installs_the_project_with_its_migrations() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", text, re.M)
    assert re.search(r"^RUN .*pip install (-e )?\.", text, re.M)
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ")}
    for needed in ("pyproject.toml", "rca", "workers", "migrations"):
        assert needed in copied, f"the image lacks {needed}"
    assert (REPO / "migrations" / "env.py").is_file()
