#!/usr/bin/env python3
"""Vendor Swagger UI and ReDoc from npm into rca/api/static/vendor/ so /docs and /redoc need no CDN.

Usage (from the repository root; needs `npm` and the npm registry, nothing else):

    python3 tools/vendor_docs_assets.py                      # re-fetch the versions in VERSIONS.json
    python3 tools/vendor_docs_assets.py swagger-ui-dist@5.36.0 redoc@2.5.5

For each package it runs `npm pack NAME@VERSION`, checks the tarball's sha512 against the registry's
`dist.integrity`, copies only the files the docs pages load plus the licence files into
`<name>-<version>/`, removes the previous version's folder and rewrites VERSIONS.json (the integrity
and a sha256 per file, which tests/api/test_docs.py checks). Then update README.md there by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parent.parent / "rca" / "api" / "static" / "vendor"
MANIFEST = VENDOR / "VERSIONS.json"

# What each package contributes: the files the pages load, then the licences that must travel with them.
FILES: dict[str, list[str]] = {
    "swagger-ui-dist": [
        "swagger-ui-bundle.js",
        "swagger-ui.css",
        "favicon-32x32.png",
        "LICENSE",
        "NOTICE",
        "swagger-ui-bundle.js.LICENSE.txt",
    ],
    "redoc": ["bundles/redoc.standalone.js", "LICENSE", "bundles/redoc.standalone.js.LICENSE.txt"],
}


def _npm(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["npm", *args], check=True, capture_output=True, text=True, cwd=cwd).stdout


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def vendor(name: str, version: str, workdir: Path) -> dict[str, object]:
    """Fetch one package at an exact version and copy its files; returns its manifest entry."""
    meta = json.loads(_npm("view", f"{name}@{version}", "version", "license", "dist", "--json"))
    if meta["version"] != version:
        raise SystemExit(f"{name}@{version}: npm resolved {meta['version']}; give an exact version")
    integrity = meta["dist"]["integrity"]
    packed = json.loads(_npm("pack", f"{name}@{version}", "--json", cwd=workdir))[0]
    tarball = workdir / packed["filename"]
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
    if algorithm != "sha512" or actual != expected:
        raise SystemExit(f"{name}@{version}: tarball {algorithm} {actual} does not match registry {integrity}")
    target = VENDOR / f"{name}-{version}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    files: dict[str, str] = {}
    with tarfile.open(tarball) as archive:
        for member in FILES[name]:
            source = archive.extractfile(f"package/{member}")
            if source is None:
                raise SystemExit(f"{name}@{version}: {member} is not a file in the tarball")
            out = target / Path(member).name
            out.write_bytes(source.read())
            files[out.name] = _sha256(out)
    return {
        "version": version,
        "license": meta["license"],
        "tarball": meta["dist"]["tarball"],
        "integrity": integrity,
        "dir": target.name,
        "files": files,
    }


def main(argv: list[str]) -> None:
    current = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    wanted = dict(spec.rsplit("@", 1) for spec in argv) if argv else {n: e["version"] for n, e in current.items()}
    unknown = set(wanted) - set(FILES)
    if unknown or not wanted:
        raise SystemExit(f"give NAME@VERSION for {', '.join(FILES)} (unknown: {', '.join(sorted(unknown))})")
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in wanted.items():
            entry = vendor(name, version, Path(tmp))
            old = current.get(name, {}).get("dir")
            if old and old != entry["dir"]:
                shutil.rmtree(VENDOR / old, ignore_errors=True)
            current[name] = entry
            print(f"{name}@{version}: {entry['integrity']}")
    MANIFEST.write_text(json.dumps(dict(sorted(current.items())), indent=2) + "\n")
    print(f"wrote {MANIFEST}; now update the versions and integrity in {VENDOR / 'README.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
