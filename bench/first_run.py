"""Benchmark: the README's first command on a fresh checkout, as a newcomer runs it.

Copies the tracked files into a temporary folder (a fresh clone, without this checkout's .venv or
data), runs the README's first command there exactly as written, and reports the install time and
the time from `rca demo` starting to the diagnosis being printed. The target (issue 13): a ranked
diagnosis with its evidence in under a minute after the install.

    .venv/bin/python bench/first_run.py [--runs 3] [--json]

pip's cache is used as any second install on a machine would; the first run of a machine that
has never downloaded the dependencies adds their download time to the install figure only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def first_command() -> str:
    """The README's first command line: the first non-comment line of its first sh block."""
    block = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    if block is None:
        raise SystemExit("README.md has no sh block")
    return next(line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#"))


def fresh_checkout(into: Path) -> None:
    """The tracked files only (what `git clone` would give), not this checkout's venv or data."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)


def one_run(command: str) -> dict[str, float | bool]:
    install, _, demo = command.rpartition("&&")
    with tempfile.TemporaryDirectory(prefix="rca-first-run-") as tmp:
        checkout = Path(tmp)
        fresh_checkout(checkout)
        started = time.monotonic()
        subprocess.run(install, shell=True, cwd=checkout, check=True)
        installed = time.monotonic()
        shown = subprocess.run(demo, shell=True, cwd=checkout, capture_output=True, text=True)
        finished = time.monotonic()
    out = shown.stdout
    diagnosis = "Ranked root causes:" in out and "supported by:" in out and "no data" not in out.lower()
    if shown.returncode != 0 or not diagnosis:
        sys.stderr.write(out + shown.stderr)
        raise SystemExit(f"the demo did not print a diagnosis (exit {shown.returncode})")
    top = re.search(r"^\s+1\. (\w+)\s+confidence ([0-9.]+)", out, re.M)
    return {
        "install_seconds": installed - started,
        "demo_seconds": finished - installed,
        "top_cause": top.group(1) if top else "",
        "confidence": float(top.group(2)) if top else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh checkouts to try (default: 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    command = first_command()
    runs = [one_run(command) for _ in range(args.runs)]
    summary = {
        "command": command,
        "runs": runs,
        "install_seconds_median": statistics.median(r["install_seconds"] for r in runs),
        "demo_seconds_median": statistics.median(r["demo_seconds"] for r in runs),
        "demo_seconds_max": max(r["demo_seconds"] for r in runs),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"command: {command}")
    for i, run in enumerate(runs, 1):
        print(
            f"run {i}: install {run['install_seconds']:.1f} s, demo to diagnosis {run['demo_seconds']:.1f} s "
            f"({run['top_cause']} {run['confidence']:.2f})"
        )
    print(
        f"median: install {summary['install_seconds_median']:.1f} s, "
        f"demo {summary['demo_seconds_median']:.1f} s (max {summary['demo_seconds_max']:.1f} s; target < 60 s)"
    )


if __name__ == "__main__":
    main()
