"""Where the repository and its virtual environment are, for tests that run its files and commands."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
