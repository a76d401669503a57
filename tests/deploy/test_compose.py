"""docker-compose.yml and the Dockerfile describe a stack the code can actually run: the
services, their order, real `rca` commands, only settings that `rca.config.Settings` knows, every
setting reachable through the env_file, secrets from files, ports on loopback, and an image that
copies everything the package needs."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from rca.cli import build_parser
from rca.config import ConfigError, Settings, load_settings
from rca.config.secrets import SECRET_FILE_SETTINGS
from tests.helpers.paths import REPO

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
RCA_NAME = re.compile(r"\bRCA_[A-Z0-9_]+\b")
ENV_EXAMPLE = REPO / "deploy" / "compose" / "rca.env.example"
SETUP = REPO / "deploy" / "compose" / "setup.sh"
ENV_LINE = re.compile(r"^(?P<comment># )?(?P<name>RCA_[A-Z0-9_]+)=(?P<value>.*)$")
RCA_SERVICES = ("api", "worker", "migrate")
# Secrets the compose stack must take from files (the list), not from plain variables.
COMPOSE_SECRETS = (
    "database_url",
    "webhook_token",
    "api_tokens",
    "llm_api_key",
    "slack_webhook_url",
    "slack_bot_token",
    "slack_signing_secret",
    "traces_headers",
)


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


def env_example() -> dict[str, tuple[bool, str]]:
    """RCA_* lines of the env_file template: name -> (commented out?, value)."""
    found: dict[str, tuple[bool, str]] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = ENV_LINE.match(line)
        if match:
            assert match["name"] not in found, f"{match['name']} listed twice in {ENV_EXAMPLE.name}"
            found[match["name"]] = (bool(match["comment"]), match["value"])
    return found


def env_file_values() -> dict[str, str]:
    """What the services get from the env_file when it is the unedited template."""
    return {name: value for name, (commented, value) in env_example().items() if not commented}


def service_env(compose: dict[str, Any], name: str) -> dict[str, str]:
    """The service's RCA_* variables as compose hands them over: env_file, then `environment:` on top."""
    return env_file_values() | {k: resolve(v) for k, v in environment_of(services(compose)[name]).items()}


def rendered_default(name: str) -> str:
    field = Settings.model_fields[name]
    value = field.get_default(call_default_factory=True)
    if value is None or value in ([], {}):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def secret_files(compose: dict[str, Any]) -> dict[str, Path]:
    """Top-level secrets: name -> host file (relative to the repository)."""
    return {name: Path(spec["file"]) for name, spec in (compose.get("secrets") or {}).items()}


def mounted_secrets(service: dict[str, Any]) -> set[str]:
    return {entry if isinstance(entry, str) else entry["source"] for entry in service.get("secrets") or []}


def test_rca_services_read_every_setting_from_the_env_file(compose: dict[str, Any]) -> None:
    for name in RCA_SERVICES:
        env_file = services(compose)[name].get("env_file")
        paths = (
            [env_file]
            if isinstance(env_file, str)
            else [e if isinstance(e, str) else e["path"] for e in env_file or []]
        )
        assert paths == ["deploy/compose/rca.env"], f"{name}: env_file is {env_file!r}"
    assert "deploy/compose/rca.env" in (REPO / ".gitignore").read_text(), "the operator's copy must not be committed"


def test_env_example_lists_every_setting_with_its_default() -> None:
    listed = env_example()
    fields = {f"RCA_{name.upper()}": name for name in Settings.model_fields}
    text = ENV_EXAMPLE.read_text()
    for env_name, field in fields.items():
        fixed = re.search(rf"^# {env_name}: .*Set by docker-compose\.yml", text, re.M)
        assert env_name in listed or fixed, f"{ENV_EXAMPLE.name} does not list {env_name}"
        if fixed or env_name not in listed:
            continue
        commented, value = listed[env_name]
        if commented and not (field.endswith("_file") and value.startswith("/run/secrets/")):
            assert value == rendered_default(field), (
                f"{env_name}: the example says {value!r}, the default is {rendered_default(field)!r}"
            )
    assert set(listed) - set(fields) == set(), f"not settings: {sorted(set(listed) - set(fields))}"


def test_settings_fixed_by_compose_are_set_in_every_rca_service(compose: dict[str, Any]) -> None:
    fixed = set(re.findall(r"^# (RCA_[A-Z0-9_]+): .*Set by docker-compose\.yml", ENV_EXAMPLE.read_text(), re.M))
    assert fixed, "the example marks no setting as fixed by docker-compose.yml"
    for env_name in fixed:
        holders = [
            name
            for name in RCA_SERVICES
            if env_name in environment_of(services(compose)[name])
            or f"{env_name}_FILE" in environment_of(services(compose)[name])
        ]
        only = {
            "RCA_HOST": ["api"],
            "RCA_PORT": ["api"],
            "RCA_WORKER_METRICS_HOST": ["worker"],
            "RCA_WORKER_METRICS_PORT": ["worker"],
        }
        wanted = only.get(env_name, list(RCA_SERVICES))
        assert holders == wanted, f"{env_name} is said to be set by docker-compose.yml, but only in {holders}"
    for name in RCA_SERVICES:  # nothing else is pinned where rca.env cannot change it
        pinned = {k for k in environment_of(services(compose)[name]) if k.startswith("RCA_")}
        assert pinned <= fixed | {f"{n}_FILE" for n in fixed}, f"{name} pins {sorted(pinned - fixed)}"


@pytest.mark.parametrize("name", RCA_SERVICES)
def test_secret_settings_come_from_mounted_docker_secrets(compose: dict[str, Any], name: str) -> None:
    declared, service = secret_files(compose), services(compose)[name]
    env = service_env(compose, name) | {
        n: v for n, (commented, v) in env_example().items() if commented and n.endswith("_FILE")
    }  # the optional ones, uncommented
    for setting in COMPOSE_SECRETS:
        assert setting in SECRET_FILE_SETTINGS
        plain, path = f"RCA_{setting.upper()}", env.get(f"RCA_{setting.upper()}_FILE", "")
        assert plain not in env, f"{name}: {plain} is a plain variable; it is a secret"
        assert path.startswith("/run/secrets/"), f"{name}: {plain}_FILE does not name a Docker secret ({path!r})"
        secret = path.removeprefix("/run/secrets/")
        assert secret in declared, f"{name}: {plain}_FILE names an undeclared secret {secret!r}"
        assert secret in mounted_secrets(service), f"{name} does not mount the secret {secret!r}"
    for secret, file in declared.items():
        assert file.parts[:3] == ("deploy", "compose", "secrets"), f"secret {secret} lives at {file}"
    assert "deploy/compose/secrets/" in (REPO / ".gitignore").read_text()


def test_postgres_password_is_a_secret_too(compose: dict[str, Any]) -> None:
    postgres = services(compose)["postgres"]
    env = environment_of(postgres)
    assert "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "postgres_password" in mounted_secrets(postgres)


def test_published_ports_are_bound_to_loopback(compose: dict[str, Any]) -> None:
    published = 0
    for name, service in services(compose).items():
        for mapping in service.get("ports") or []:
            host_ip = mapping.get("host_ip") if isinstance(mapping, dict) else str(mapping).rsplit(":", 2)[0]
            assert isinstance(mapping, dict) or str(mapping).count(":") == 2, f"{name}: {mapping} binds every address"
            assert host_ip == "127.0.0.1", f"{name} publishes {mapping} beyond loopback"
            published += 1
    assert published, "the API publishes no port"


def run_setup(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SETUP), str(directory)], capture_output=True, text=True, timeout=30)


@pytest.fixture
def setup_dir(tmp_path: Path) -> Path:
    result = run_setup(tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


def container_env(compose: dict[str, Any], name: str, setup_dir: Path, **extra: str) -> dict[str, str]:
    """The service's settings with /run/secrets/<secret> pointing at the files setup.sh wrote."""
    files = {secret: setup_dir / "secrets" / file.name for secret, file in secret_files(compose).items()}
    mounted = mounted_secrets(services(compose)[name])

    def local(value: str) -> str:
        secret = value.removeprefix("/run/secrets/")
        if value.startswith("/run/secrets/"):
            assert secret in mounted, f"{name} reads {value} without mounting it"
            return str(files[secret])
        return value

    return {k: local(v) for k, v in (service_env(compose, name) | extra).items()}


def test_setup_writes_every_secret_file_compose_mounts(compose: dict[str, Any], setup_dir: Path) -> None:
    assert (setup_dir / "rca.env").read_text() == ENV_EXAMPLE.read_text()
    for secret, file in secret_files(compose).items():
        made = setup_dir / "secrets" / file.name
        assert made.is_file(), f"setup.sh does not create {file} (secret {secret})"
        assert made.stat().st_mode & 0o004, f"{file}: the container's rca user could not read it"
    assert (setup_dir / "secrets").stat().st_mode & 0o077 == 0, "the secrets directory is open to other users"
    password = (setup_dir / "secrets" / "postgres_password").read_text().strip()
    url = (setup_dir / "secrets" / "database_url").read_text().strip()
    assert len(password) >= 32 and f":{password}@postgres:5432/" in url
    first = {f.name: f.read_text() for f in (setup_dir / "secrets").iterdir()}
    assert run_setup(setup_dir).returncode == 0  # a second run keeps what is there
    assert {f.name: f.read_text() for f in (setup_dir / "secrets").iterdir()} == first


@pytest.mark.parametrize("name", RCA_SERVICES)
def test_compose_settings_pass_the_services_own_validation(compose: dict[str, Any], setup_dir: Path, name: str) -> None:
    env = container_env(compose, name, setup_dir)
    settings = load_settings(**{k.removeprefix("RCA_").lower(): v for k, v in env.items()})
    assert settings.database_url and settings.database_url.startswith("postgresql+psycopg://rca:")
    assert "@postgres:5432/" in settings.database_url
    assert settings.broker_url and settings.broker_url.startswith("redis://redis:6379/")
    assert not settings.embedded_queue
    assert settings.webhook_token is not None and len(settings.webhook_token.get_secret_value()) >= 32
    assert settings.api_tokens and settings.prometheus_url


def test_an_optional_secret_named_but_not_written_stops_the_service(compose: dict[str, Any], setup_dir: Path) -> None:
    env = container_env(compose, "worker", setup_dir, RCA_SLACK_WEBHOOK_URL_FILE="/run/secrets/rca_slack_webhook_url")
    with pytest.raises(ConfigError, match=r"^RCA_SLACK_WEBHOOK_URL_FILE: .*slack_webhook_url is empty$"):
        load_settings(**{k.removeprefix("RCA_").lower(): v for k, v in env.items()})
    (setup_dir / "secrets" / "slack_webhook_url").write_text("https://hooks.slack.com/services/T/B/x\n")
    settings = load_settings(**{k.removeprefix("RCA_").lower(): v for k, v in env.items()})
    assert settings.slack_enabled


# --------------------------------------------------------------------------- the image


@functools.cache
def docker_context() -> ModuleType:
    """.ci/docker_context.py: the one Dockerfile and .dockerignore reader, shared with CI."""
    spec = importlib.util.spec_from_file_location("docker_context", REPO / ".ci" / "docker_context.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_dockerfile_installs_the_project_with_python_3_11_or_later() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", text, re.M)
    _, install = docker_context().parse_dockerfile(DOCKERFILE)
    assert install.target == "." and install.workdir == "/app"


def test_every_path_the_dockerfile_copies_exists() -> None:
    copies, _ = docker_context().parse_dockerfile(DOCKERFILE)
    for copy in copies:
        for source in copy.sources:
            assert (REPO / source).exists(), f"Dockerfile:{copy.line} copies {source}, which does not exist"


def test_every_package_directory_pyproject_maps_is_copied() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    tool = project["tool"]["setuptools"]
    mapped = tool.get("package-dir", {})
    needed = {"pyproject.toml", project["project"]["readme"]}
    for package in tool["packages"]:
        top = package.split(".")[0]
        needed.add(mapped.get(top, top).split("/")[0])
    copies, install = docker_context().parse_dockerfile(DOCKERFILE)
    copied = {(source, copy.dest) for copy in copies for source in copy.sources}
    for path in sorted(needed):
        assert (REPO / path).exists(), f"pyproject.toml maps {path}, which does not exist"
        into = [dest for source, dest in copied if source.rstrip("/") == path]
        assert into, f"the Dockerfile does not copy {path}, which pyproject.toml needs"
        assert all(dest.rstrip("/").startswith(install.workdir) for dest in into), (path, into)


def test_dockerignore_keeps_local_state_out_and_nothing_the_image_needs() -> None:
    module = docker_context()
    ignore = module.DockerIgnore.read(REPO / ".dockerignore")
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "rca-data/rca.db",
        "rca/__pycache__/cli.cpython-311.pyc",
        "__pycache__/x.pyc",
        "deploy/compose/secrets/webhook_token",
        "deploy/compose/rca.env",
    ):
        assert ignore.excluded_by(path), f".dockerignore sends {path} to the Docker daemon"
    copies, _ = module.parse_dockerfile(DOCKERFILE)
    assert module.Context(REPO).tracked_but_ignored(copies) == []
    for path in ("rca/cli/__init__.py", "prompts/system.j2", "migrations/env.py", "README.md", "pyproject.toml"):
        assert not ignore.excluded_by(path), f".dockerignore drops {path}"


@pytest.mark.parametrize(
    ("lines", "path", "excluded"),
    [
        (["__pycache__"], "rca/__pycache__/x.pyc", False),  # Docker anchors a bare name at the root
        (["**/__pycache__"], "rca/__pycache__/x.pyc", True),
        (["*.md", "!README.md"], "README.md", False),
        (["*.md"], "prompts/README.md", False),
        (["prompts"], "prompts/system.j2", True),  # a directory excludes what is under it
        (["rca/*/x.py"], "rca/api/x.py", True),
        (["rca/*/x.py"], "rca/api/deep/x.py", False),
        (["/build"], "build/lib/a.py", True),
    ],
)
def test_dockerignore_matching_follows_docker(tmp_path: Path, lines: list[str], path: str, excluded: bool) -> None:
    (tmp_path / ".dockerignore").write_text("\n".join(lines) + "\n")
    ignore = docker_context().DockerIgnore.read(tmp_path / ".dockerignore")
    assert bool(ignore.excluded_by(path)) is excluded
