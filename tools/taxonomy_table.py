"""Rewrite the taxonomy table in docs/diagnosis.md from rca/diagnosis/taxonomy.yaml (anchors,
supporting and contradicting weights); the descriptions stay as written.

    .venv/bin/python tools/taxonomy_table.py

tests/diagnosis/test_ranking.py fails when the table and the taxonomy differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.diagnosis.ranking import NO_CLEAR_CAUSE, taxonomy  # noqa: E402

DOC = REPO / "docs" / "diagnosis.md"
ROW = re.compile(r"\| `(\w+)` \| ([^|]*) \|")


def _weights(weights: dict[str, float]) -> str:
    return ", ".join(f"`{key}` {value:g}" for key, value in weights.items()) or "—"


def _anchors(anchors: list[str | list[str]]) -> str:
    cells = [f"`{a}`" if isinstance(a, str) else " + ".join(f"`{k}`" for k in a) for a in anchors]
    return ", ".join(cells) or "—"


def main() -> None:
    categories = taxonomy()  # the taxonomy as the ranking loads and checks it
    lines = []
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match and match.group(1) in categories and match.group(1) != NO_CLEAR_CAUSE:
            cat = categories[match.group(1)]
            line = (
                f"| `{match.group(1)}` | {match.group(2).strip()} | {_anchors(cat.anchors)} | "
                f"{_weights(cat.supports)} | {_weights(cat.contradicts)} |"
            )
        lines.append(line)
    DOC.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
