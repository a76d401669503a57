"""Settings: a bad value is refused at start-up with one line naming the setting, both through
`rca.config.load_settings` and through the real `rca` command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import make_url

from rca.config import ConfigError, Settings, load_settings
from rca.config.secrets import SECRET_FILE_SETTINGS
from rca.startup import checked_settings
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL, create_database, drop_database
from tests.helpers.paths import VENV_BIN
from tests.helpers.processes import subprocess_env


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RCA_PORT", "abc", "valid integer"),
        ("RCA_PORT", "70000", "less than or equal to 65535"),
        ("RCA_DATABASE_URL", "mysql://x", "unsupported database 'mysql'"),
        ("RCA_DATABASE_URL", "not a url", "not a database URL"),
        ("RCA_BROKER_URL", "foo", "redis://"),
        ("RCA_PROMETHEUS_URL", "ftp://x", "http://"),
        ("RCA_LOOKBACK_MINUTES", "1", "greater than or equal to 10"),
        ("RCA_WEBHOOK_MAX_BODY_BYTES", "10", "greater than or equal to 1024"),
        # a longer key could not fit the open-group index (2,704 bytes a row): never storable
        ("RCA_WEBHOOK_MAX_GROUP_KEY_BYTES", "3000", "less than or equal to 2600"),
        ("RCA_REQUEST_BODY_TIMEOUT_SECONDS", "0", "greater than 0"),
        ("RCA_LOG_LEVEL", "verbose", "'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL'"),
    ],
)
def test_bad_environment_value_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{name}: "), message
    assert fragment in message
    assert "\n" not in message


def test_urls_and_tokens_are_not_echoed_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCA_DATABASE_URL", "mysql://admin:hunter2@db/x")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "hunter2" not in str(caught.value)


def test_valid_environment_is_read_and_normalised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {
        "RCA_PORT": "9000",
        "RCA_DATABASE_URL": "postgresql://u:p@db:5432/rca",
        "RCA_BROKER_URL": "redis://redis:6379/0",
        "RCA_PROMETHEUS_URL": "http://prom:9090/",
        "RCA_API_TOKENS": " one, two ,,",
        "RCA_WEBHOOK_TOKEN": "hook",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.port == 9000
    assert make_url(settings.database_url).get_driver_name() == "psycopg"  # the driver we ship
    assert make_url(settings.database_url).password == "p"
    assert settings.prometheus_url == "http://prom:9090"
    assert [t.get_secret_value() for t in settings.api_tokens] == ["one", "two"]
    assert settings.webhook_token is not None and settings.webhook_token.get_secret_value() == "hook"
    assert not settings.embedded_queue


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg2", "postgresql+psycopg"])
def test_postgres_urls_use_the_shipped_psycopg_driver(scheme: str) -> None:
    settings = load_settings(database_url=f"{scheme}://u:p%40ss@db/rca")
    url = make_url(settings.database_url)
    assert (url.get_driver_name(), url.password, url.database) == ("psycopg", "p@ss", "rca")


def test_defaults_are_the_embedded_mode(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    assert settings.embedded_queue
    assert settings.effective_database_url == f"sqlite:///{(tmp_path / 'rca.db').resolve()}"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("thresholds: [\n  queue_median: 3", ("not valid YAML",)),
        ("thresholds: {}\nbogus: 1\n", ("bogus", "Extra inputs are not permitted")),
        ("target:\n  host_lables: [instance]\n", ("target.host_lables", "Extra inputs are not permitted")),
        ("thresholds:\n  queue_median: many\n", ("thresholds.queue_median", "valid number")),
        ("- a\n- b\n", ("top level", "valid dictionary")),
        ("thresholds:\n  no_such_signal: 1\n", ("thresholds", "no_such_signal")),
        ("profile: no_such_profile\n", ("no_such_profile", "not found")),
    ],
    ids=[
        "bad-yaml",
        "unknown-key",
        "unknown-nested-key",
        "wrong-type",
        "not-a-mapping",
        "unknown-signal",
        "unknown-profile",
    ],
)
def test_bad_config_file_is_one_line_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, fragments: tuple[str, ...]
) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text(text)
    monkeypatch.setenv("RCA_CONFIG_FILE", str(path))
    with pytest.raises(ConfigError) as caught:
        checked_settings()
    message = str(caught.value)
    assert message.startswith("RCA_CONFIG_FILE: "), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RCA_CONFIG_FILE", str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match=r"^RCA_CONFIG_FILE: cannot read .*absent.yaml"):
        checked_settings()


def test_valid_config_file_is_applied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text("thresholds:\n  queue_median: 3.5\ntarget:\n  host_labels: [node]\n")
    monkeypatch.setenv("RCA_CONFIG_FILE", str(path))
    config = load_settings().file_config()
    assert config.thresholds == {"queue_median": 3.5}
    assert config.target.host_labels == ["node"]


# --------------------------------------------------------------------------- secrets from files

# A valid value for each setting that RCA_<NAME>_FILE can supply, and how the parsed value reads back.
SECRET_VALUES = {
    "database_url": ("postgresql+psycopg://rca:s3cret@db:5432/rca", lambda s: s.database_url),
    "broker_url": ("redis://:s3cret@redis:6379/0", lambda s: s.broker_url),
    "webhook_token": ("hook-s3cret", lambda s: s.webhook_token.get_secret_value()),
    "api_tokens": ("one,two", lambda s: ",".join(t.get_secret_value() for t in s.api_tokens)),
    "slack_webhook_url": (
        "https://hooks.slack.com/services/T/B/s3cret",
        lambda s: s.slack_webhook_url.get_secret_value(),
    ),
    "slack_bot_token": ("xoxb-s3cret", lambda s: s.slack_bot_token.get_secret_value()),
    "slack_signing_secret": ("8f742231b10e8888abcd99yyyzzz85a5", lambda s: s.slack_signing_secret.get_secret_value()),
    "traces_headers": (
        '{"Authorization": "Bearer s3cret"}',
        lambda s: json.dumps({k: v.get_secret_value() for k, v in s.traces_headers.items()}),
    ),
    "llm_api_key": ("sk-s3cret", lambda s: s.llm_api_key.get_secret_value()),
}


def test_every_file_setting_is_a_documented_setting_of_its_own() -> None:
    assert set(SECRET_VALUES) == set(SECRET_FILE_SETTINGS)
    for name in SECRET_FILE_SETTINGS:
        assert name in Settings.model_fields and f"{name}_file" in Settings.model_fields, name


@pytest.mark.parametrize("name", sorted(SECRET_VALUES))
def test_secret_is_read_from_its_file_without_the_trailing_newline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    value, read_back = SECRET_VALUES[name]
    secret = tmp_path / name
    secret.write_text(value + "\n")  # as `echo value > file` and most secret stores write it
    monkeypatch.setenv(f"RCA_{name.upper()}_FILE", str(secret))
    if name == "slack_bot_token":
        monkeypatch.setenv("RCA_SLACK_CHANNEL", "#incidents")
    assert read_back(load_settings()) == value


def test_token_file_takes_one_token_a_line(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("first\nsecond\r\n\nthird\n")
    settings = load_settings(api_tokens_file=str(tmp_path / "tokens"))
    assert [t.get_secret_value() for t in settings.api_tokens] == ["first", "second", "third"]


@pytest.mark.parametrize("via", ["environment", "arguments"])
def test_a_secret_given_both_ways_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, via: str) -> None:
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv("RCA_WEBHOOK_TOKEN_FILE", str(tmp_path / "token"))
    if via == "environment":
        monkeypatch.setenv("RCA_WEBHOOK_TOKEN", "from-env")
        arguments = {}
    else:
        arguments = {"webhook_token": "from-argument"}
    with pytest.raises(ConfigError) as caught:
        load_settings(**arguments)
    assert str(caught.value) == (
        "RCA_WEBHOOK_TOKEN_FILE: set either RCA_WEBHOOK_TOKEN or RCA_WEBHOOK_TOKEN_FILE, not both"
    )


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda path: None, "cannot read {path}: No such file or directory"),
        (lambda path: path.mkdir(), "cannot read {path}: Is a directory"),
        (lambda path: path.write_text(""), "{path} is empty"),
        (lambda path: path.write_text("\n"), "{path} is empty"),
        (lambda path: path.write_text("  \n\n"), "{path} is empty"),
        (lambda path: path.write_bytes(b"\xff\xfe token"), "{path} is not UTF-8 text"),
    ],
    ids=["missing", "unreadable-directory", "empty", "only-a-newline", "blank", "not-text"],
)
def test_unusable_secret_file_is_one_line_naming_the_file_setting(tmp_path: Path, make, fragment: str) -> None:
    path = tmp_path / "llm-key"
    make(path)
    with pytest.raises(ConfigError) as caught:
        load_settings(llm_api_key_file=str(path))
    assert str(caught.value) == "RCA_LLM_API_KEY_FILE: " + fragment.format(path=path)


def test_a_bad_value_from_a_file_names_both_settings_and_hides_the_secret(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("http://hooks.example.com/s3cret\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(slack_webhook_url_file=str(tmp_path / "url"))
    message = str(caught.value)
    assert message.startswith("RCA_SLACK_WEBHOOK_URL: "), message
    assert "(read from RCA_SLACK_WEBHOOK_URL_FILE)" in message
    assert "s3cret" not in message


# --------------------------------------------------------------------------- the real command


def run_rca(tmp_path: Path, *args: str, **rca_env: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(data_dir=str(tmp_path / "rca-data"), **rca_env)
    return subprocess.run(
        [str(VENV_BIN / "rca"), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], prefix: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_cli_with_a_bad_port_exits_2_with_one_error_line(tmp_path: Path) -> None:
    result = run_rca(tmp_path, "serve", port="abc", webhook_token="t", api_tokens="a")
    assert_one_line_error(result, "error: RCA_PORT: ")
    assert not (tmp_path / "rca-data").exists()


def test_cli_serve_without_a_webhook_token_names_rca_webhook_token(tmp_path: Path) -> None:
    result = run_rca(tmp_path, "serve", api_tokens="a")
    line = assert_one_line_error(result, "error: RCA_WEBHOOK_TOKEN: ")
    assert "RCA_WEBHOOK_ALLOW_UNAUTHENTICATED" in line


def test_cli_serve_without_api_tokens_names_rca_api_tokens(tmp_path: Path) -> None:
    result = run_rca(tmp_path, "serve", webhook_token="t")
    assert_one_line_error(result, "error: RCA_API_TOKENS: ")


def test_cli_serve_with_an_unreachable_database_says_so(tmp_path: Path) -> None:
    result = run_rca(tmp_path, "serve", webhook_token="t", api_tokens="a", database_url=CLOSED_PORT_DATABASE_URL)
    line = assert_one_line_error(result, "error: RCA_DATABASE_URL: cannot connect")
    assert "is the database running?" in line


def test_cli_serve_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    url = create_database()
    try:
        result = run_rca(tmp_path, "serve", webhook_token="t", api_tokens="a", database_url=url)
    finally:
        drop_database(url)
    line = assert_one_line_error(result, "error: RCA_DATABASE_URL: schema is at nothing")  # no Alembic INFO lines
    assert "rca migrate" in line


def test_cli_worker_without_a_broker_names_rca_broker_url(tmp_path: Path) -> None:
    assert_one_line_error(run_rca(tmp_path, "worker"), "error: RCA_BROKER_URL: ")


def test_cli_with_a_bad_config_file_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "rca.yaml").write_text("thresholds: {}\nbogus: 1\n")
    result = run_rca(tmp_path, "serve", webhook_token="t", api_tokens="a", config_file=str(tmp_path / "rca.yaml"))
    assert_one_line_error(result, "error: RCA_CONFIG_FILE: ")


def test_cli_with_a_missing_secret_file_exits_2_naming_it(tmp_path: Path) -> None:
    result = run_rca(tmp_path, "serve", api_tokens="a", webhook_token_file=str(tmp_path / "absent"))
    line = assert_one_line_error(result, "error: RCA_WEBHOOK_TOKEN_FILE: cannot read ")
    assert "No such file or directory" in line


def test_cli_reads_the_tokens_from_files(tmp_path: Path) -> None:
    """`rca serve` gets past its token checks on secrets from files alone (then stops at the
    database, which is closed): the files really reach the command."""
    (tmp_path / "hook").write_text("t\n")
    (tmp_path / "api").write_text("a\n")
    result = run_rca(
        tmp_path,
        "serve",
        webhook_token_file=str(tmp_path / "hook"),
        api_tokens_file=str(tmp_path / "api"),
        database_url=CLOSED_PORT_DATABASE_URL,
    )
    assert_one_line_error(result, "error: RCA_DATABASE_URL: cannot connect")
