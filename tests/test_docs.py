"""The docs match the code: every setting in docs/configuration.md's table, the taxonomy list,
links that resolve, one receiver URL, a README that fits. Docs that drift are how a newcomer's first hour goes wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rca.config import Settings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()
CHECKS = (REPO / "docs" / "checks.md").read_text()
RECEIVER_URL = "http://rca-api:8080/api/v1/alertmanager"


def _settings_table() -> dict[str, str]:
    """`RCA_X` -> its default cell, from docs/configuration.md's settings table (a row may name several)."""
    rows: dict[str, str] = {}
    for line in CONFIGURATION.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`RCA_"):
            continue
        names = re.findall(r"`(RCA_[A-Z0-9_]+)`", cells[0])
        defaults = [part.strip() for part in cells[1].split(",")]
        for i, name in enumerate(names):
            rows[name] = defaults[i] if len(defaults) == len(names) else cells[1]
    return rows


def _env_names() -> set[str]:
    prefix = Settings.model_config["env_prefix"]
    return {prefix + name.upper() for name in Settings.model_fields}


def test_every_setting_is_in_the_configuration_table_and_nothing_else() -> None:
    table = set(_settings_table())
    assert sorted(_env_names() - table) == [], "settings missing from the docs/configuration.md table"
    assert sorted(table - _env_names()) == [], "docs/configuration.md table rows that are not settings"


def test_plain_defaults_in_the_table_are_the_models_defaults() -> None:
    prefix = Settings.model_config["env_prefix"]
    checked = 0
    for name, cell in _settings_table().items():
        field = Settings.model_fields[name.removeprefix(prefix).lower()]
        default = field.default
        plain = cell.strip("`")
        if isinstance(default, bool):
            assert plain == str(default).lower(), name
        elif isinstance(default, int | float) and re.fullmatch(r"[0-9.]+", plain):
            assert float(plain) == float(default), name
        else:
            continue
        checked += 1
    assert checked >= 20  # the test must actually compare something


def test_taxonomy_list_in_the_docs_is_the_taxonomy() -> None:
    taxonomy = yaml.safe_load((REPO / "rca" / "diagnosis" / "taxonomy.yaml").read_text())
    paragraph = CHECKS.split("Root-cause taxonomy (stable ids):", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"`([a-z_]+)`", paragraph.split("(`rca/", 1)[0])
    assert listed == list(taxonomy["categories"])


def test_readme_fits_and_lists_every_doc() -> None:
    """The README is the quick start and the first production start; the rest lives in docs/."""
    assert len(README.split()) <= 1500
    first_screen = README.split("## ", 1)[0]
    assert "&& .venv/bin/rca demo" in first_screen and "Ranked root causes:" in first_screen
    assert "## Running it for real" in README
    listed = set(re.findall(r"\]\(docs/([^)#\s]+\.md)\)", README))
    assert sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name not in listed) == []


DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "deploy").rglob("*.md")),
    *sorted((REPO / "bench").rglob("*.md")),
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+://|mailto:|#", target):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert broken == []


def test_one_receiver_url_everywhere() -> None:
    files = [
        REPO / "README.md",
        REPO / "docker-compose.yml",
        *DOCS,
        *(p for p in (REPO / "deploy").rglob("*") if p.suffix in (".yml", ".yaml", ".md", ".tpl")),
    ]
    urls = set()
    for path in files:
        urls |= {(m, path.name) for m in re.findall(r"https?://[^\s\"'`]+/api/v1/alertmanager", path.read_text())}
    assert urls, "no receiver URL documented"
    # From another Kubernetes namespace the same Service is spelt rca-api.<namespace>.svc.
    same = {re.sub(r"//rca-api\.[a-z0-9-]+\.svc(\.cluster\.local)?:", "//rca-api:", url) for url, _ in urls}
    assert same == {RECEIVER_URL}, sorted(urls)
