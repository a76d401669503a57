"""uPlot is vendored in the package at a pinned version with its licence, and the pages load only
this server's files (no CDN)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from rca.pages.render import STATIC_DIR, STATIC_PATH, UPLOT
from tests.helpers.service import API_AUTH
from tests.pages.test_routes import open_incident, site

README = STATIC_DIR / "vendor" / "README.md"


def test_the_vendored_files_are_those_the_readme_lists_with_their_hashes_and_licence() -> None:
    folder = STATIC_DIR / UPLOT
    version = folder.name.removeprefix("uplot-")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"pin an exact version, not {version!r}"
    assert [p.name for p in (STATIC_DIR / "vendor").iterdir() if p.is_dir()] == [folder.name], "a stale folder"
    row = next(line for line in README.read_text().splitlines() if line.startswith("| [`uplot`]"))
    assert f"| {version} |" in row
    listed = dict(re.findall(r"`(?:dist/)?([\w.]+)` \(`([0-9a-f]{64})`\)", row))
    assert set(listed) == {p.name for p in folder.iterdir()}
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, f"{name} differs from npm's"
    assert "MIT License" in (folder / "LICENSE").read_text()


def test_an_incident_page_loads_only_local_files_and_each_is_served(pg_db: str, tmp_path: Path) -> None:
    with site(pg_db, tmp_path) as client:
        html = client.get(f"/incidents/{open_incident(client, pg_db)}", headers=API_AUTH).text
        loaded = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
        assert f"{STATIC_PATH}/{UPLOT}/uPlot.iife.min.js" in loaded and f"{STATIC_PATH}/charts.js" in loaded
        for url in loaded:
            if url.startswith("data:"):
                continue
            assert url.startswith(f"{STATIC_PATH}/"), url
            assert client.get(url).status_code == 200, url
