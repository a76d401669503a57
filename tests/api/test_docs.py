"""/docs (Swagger UI) and /redoc (ReDoc) work without the internet: their assets are vendored in the
package (checked against the manifest of what was taken from npm), the pages name only this
server's URLs, a regular `pip install` carries the files, and a real browser with the network cut
renders the operations while asking nothing of any other host."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.api.docs import STATIC_DIR, VENDOR_MANIFEST
from tests.helpers.paths import REPO
from tests.helpers.service import RecordingDispatcher, make_settings

VENDOR = STATIC_DIR / "vendor"
PAGES = {
    "/docs": ["swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"],
    "/redoc": ["redoc.standalone.js", "favicon-32x32.png"],
}
CONTENT_TYPES = {
    ".js": ("text/javascript", "application/javascript"),
    ".css": ("text/css",),
    ".png": ("image/png",),
    ".json": ("application/json",),
}
# Operation summaries from the OpenAPI document that a rendered page shows.
RENDERED = ["Alertmanager webhook receiver (payload version 4)", "Search the incident history"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def docs_client(sqlite_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The app with no credentials sent: the docs must not need any."""
    with TestClient(create_app(make_settings(sqlite_url, tmp_path), dispatcher=RecordingDispatcher())) as client:
        yield client


# --------------------------------------------------------------------------- what was vendored


def test_vendored_files_are_exactly_those_the_manifest_lists_with_their_hashes_and_licences() -> None:
    assert set(VENDOR_MANIFEST) == {"swagger-ui-dist", "redoc"}
    folders = {p.name for p in VENDOR.iterdir() if p.is_dir()}
    assert folders == {entry["dir"] for entry in VENDOR_MANIFEST.values()}, "a stale or unlisted vendor folder"
    readme = (VENDOR / "README.md").read_text()
    for name, entry in VENDOR_MANIFEST.items():
        version = entry["version"]
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: pin an exact version, not {version!r}"
        assert entry["dir"] == f"{name}-{version}"
        assert entry["tarball"] == f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
        assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", entry["integrity"]), entry["integrity"]
        folder = VENDOR / entry["dir"]
        assert {p.name for p in folder.iterdir()} == set(entry["files"]), f"{name}: files differ from the manifest"
        for file, digest in entry["files"].items():
            assert sha256((folder / file).read_bytes()) == digest, f"{name}/{file} differs from what npm gave"
        assert "LICENSE" in entry["files"] and (folder / "LICENSE").stat().st_size > 500, f"{name}: no licence"
        # The human-readable table says the same version and integrity as the manifest.
        row = next((line for line in readme.splitlines() if line.startswith(f"| [`{name}`]")), "")
        assert f"| {version} |" in row and entry["integrity"] in row, f"README.md's row for {name} is stale: {row!r}"


# --------------------------------------------------------------------------- the pages


def referenced_urls(html: str) -> list[str]:
    """Every URL the page loads: src/href attributes, ReDoc's spec-url and Swagger UI's `url:`."""
    return re.findall(r'\b(?:src|href|spec-url)="([^"]*)"', html) + re.findall(r"\burl: '([^']*)'", html)


@pytest.mark.parametrize("page", list(PAGES))
def test_docs_pages_name_only_local_urls_and_each_is_served(docs_client: TestClient, page: str) -> None:
    reply = docs_client.get(page)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    html = reply.text
    assert not re.findall(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}", html, re.IGNORECASE), (
        "the page names another host (a CDN, Google Fonts, FastAPI's favicon?)"
    )
    urls = referenced_urls(html)
    assert "/openapi.json" in urls
    for name in PAGES[page]:
        assert any(url.endswith(f"/{name}") for url in urls), f"{page} does not load the vendored {name}"
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = docs_client.get(url)
        assert asset.status_code == 200, f"{page} refers to {url}: {asset.status_code}"
        allowed = CONTENT_TYPES[Path(urlsplit(url).path).suffix]
        assert asset.headers["content-type"].split(";")[0] in allowed, (url, asset.headers["content-type"])
        if url.startswith("/static/vendor/"):
            assert asset.content == (STATIC_DIR / url.removeprefix("/static/")).read_bytes()


def test_swagger_ui_has_no_online_validator_and_redoc_no_google_fonts(docs_client: TestClient) -> None:
    assert '"validatorUrl": null' in docs_client.get("/docs").text  # its badge is an image from swagger.io
    assert "fonts.googleapis.com" not in docs_client.get("/redoc").text


@pytest.mark.parametrize("page", list(PAGES))
def test_docs_pages_forbid_every_other_origin(docs_client: TestClient, page: str) -> None:
    policy = docs_client.get(page).headers["content-security-policy"]
    directives = dict((d.split(" ", 1) + [""])[:2] for d in policy.split("; "))
    assert directives["default-src"] == "'none'"
    for directive in ("script-src", "style-src", "img-src", "connect-src", "font-src"):
        sources = directives[directive].split()
        assert "'self'" in sources and not [s for s in sources if "." in s or s in ("*", "https:", "http:")], (
            f"{directive} allows another origin: {sources}"
        )


def test_docs_and_schema_are_public_but_the_api_is_not(docs_client: TestClient) -> None:
    """The documented choice (README): docs describe the API like /openapi.json, which was always
    public; every operation they can try still needs its token."""
    for path in ("/docs", "/redoc", "/openapi.json", f"/static/vendor/{VENDOR_MANIFEST['redoc']['dir']}/LICENSE"):
        assert docs_client.get(path).status_code == 200, path
    assert docs_client.get("/api/v1/incidents").status_code == 401
    assert docs_client.post("/api/v1/alertmanager", json={}).status_code == 401


def test_behind_a_path_prefix_every_url_carries_it(sqlite_url: str, tmp_path: Path) -> None:
    app = create_app(make_settings(sqlite_url, tmp_path), dispatcher=RecordingDispatcher())
    with TestClient(app, root_path="/rca") as client:
        for page in PAGES:
            urls = referenced_urls(client.get(page).text)
            assert urls and all(url.startswith("/rca/") for url in urls), urls


# --------------------------------------------------------------------------- a regular install


INSTALLED_CHECK = """
import hashlib, json, sys, tempfile
from pathlib import Path
from fastapi.testclient import TestClient
import rca
from rca.api.app import create_app
from rca.config import load_settings
d = Path(tempfile.mkdtemp())
app = create_app(load_settings(database_url=f"sqlite:///{d}/rca.db", data_dir=d, webhook_token="w", api_tokens="a"))
client = TestClient(app)  # no lifespan: the pages need neither the database nor a dispatcher
assets = {}
for page in ("/docs", "/redoc"):
    html = client.get(page).text
    for url in __import__("re").findall(r'(?:src|href)="([^"]*)"', html):
        reply = client.get(url)
        assets[url] = [reply.status_code, hashlib.sha256(reply.content).hexdigest()]
print(json.dumps({"package": rca.__file__, "assets": assets}))
"""


def test_a_regular_non_editable_install_carries_and_serves_the_vendored_files(tmp_path: Path) -> None:
    """Builds the wheel from a copy of the sources (as `pip install .` does), installs it into a
    folder of its own and serves the pages from there, not from this checkout."""
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".ruff_cache",
            "rca-data",
            "tests",
            "bench",
            "docs",
            "deploy",
        ),
    )
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)], check=True, capture_output=True)
    [wheel] = wheels.glob("*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")} | {"PYTHONPATH": str(target)}
    with tempfile.TemporaryDirectory() as cwd:  # so that this checkout's rca/ is not importable
        run = subprocess.run(
            [sys.executable, "-c", INSTALLED_CHECK], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(target)), f"served from {result['package']}, not the installed wheel"
    expected = {
        f"/static/vendor/{entry['dir']}/{name}": digest
        for entry in VENDOR_MANIFEST.values()
        for name, digest in entry["files"].items()
    }
    assert len(result["assets"]) == 4, result["assets"]  # bundle + css + favicon; redoc's bundle (+ same favicon)
    for url, (status, digest) in result["assets"].items():
        assert status == 200, url
        assert digest == expected[url], url


# --------------------------------------------------------------------------- a real browser, offline


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.fail(
        "no chromium: `apt-get install -y chromium` (.ci/run installs it); this test proves /docs and "
        "/redoc render offline"
    )


def page_requests(net_log: Path, origin: str) -> list[str]:
    """URLs the page itself requested (its network isolation key is the page's site), from
    Chromium's net log; the browser's own background requests carry other keys."""
    log = json.loads(net_log.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    site = f"{urlsplit(origin).scheme}://{urlsplit(origin).hostname}"
    return [
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == start
        and "url" in e.get("params", {})
        and e["params"].get("network_isolation_key", "").startswith(site)
    ]


@pytest.mark.parametrize("page", list(PAGES))
def test_a_browser_with_the_network_cut_renders_the_operations_from_local_files_only(
    sqlite_url: str, tmp_path: Path, page: str
) -> None:
    from tests.helpers.service import LiveServer

    chromium = find_chromium()
    net_log = tmp_path / "net-log.json"
    app = create_app(make_settings(sqlite_url, tmp_path), dispatcher=RecordingDispatcher())
    with LiveServer(app) as server:
        run = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-features=AutofillServerCommunication",
                f"--user-data-dir={tmp_path / 'profile'}",
                # Every host but this server resolves to nothing: a CDN asset would simply not load.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                f"--log-net-log={net_log}",
                "--virtual-time-budget=20000",
                "--dump-dom",
                f"{server.url}{page}",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    for summary in RENDERED:
        assert summary in run.stdout, f"{page} did not render {summary!r} offline"
    requested = page_requests(net_log, server.url)
    assert f"{server.url}/openapi.json" in requested and f"{server.url}{page}" in requested, requested
    assert any(url.endswith(PAGES[page][0]) for url in requested), requested
    elsewhere = [url for url in requested if not url.startswith(f"{server.url}/")]
    assert not elsewhere, f"{page} asked other hosts for {elsewhere}"
