"""docs/architecture.md's table of rooms against the import graph: each `rca.<room>` row's "Depends
on" column names exactly the rooms its modules import directly (grimp's graph, the one
`lint-imports` checks), and every room has a row.

An import under `if TYPE_CHECKING:` or inside a function counts: grimp reports both, `lint-imports`'
layers count both, and a room that names another's types depends on it (rca.cli names the scan's
`BacktestResult` for mypy, and imports its `backtest` when the command runs). A
parenthesised note in the column ("incidents (the notices owed)") is only a note; a name there that
is no room (pydantic) is a library, and must be one that can be imported."""

from __future__ import annotations

import importlib.util
import re
from functools import cache

import grimp

from tests.helpers.paths import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
# Children of `rca` that are no room: the `python -m rca` entry point, and packages that hold data.
NOT_ROOMS = {"__main__", "profiles", "samples"}
NOTHING = "nothing of rca"


@cache
def imported_rooms() -> dict[str, set[str]]:
    """Each room of `rca` and the other rooms its modules import directly."""
    graph = grimp.build_graph("rca")
    rooms: dict[str, set[str]] = {}
    for module in graph.modules:
        if module == "rca":
            continue
        room = module.split(".")[1]
        imported = {
            target.split(".")[1] for target in graph.find_modules_directly_imported_by(module) if target != "rca"
        }
        rooms.setdefault(room, set()).update(imported - {room})
    return {room: deps for room, deps in rooms.items() if room not in NOT_ROOMS}


def documented_rooms(text: str) -> dict[str, list[str]]:
    """Each `rca.<room>` row of the table and the names in its "Depends on" column, notes dropped."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`rca\.(\w+)`\s*\|.*\|([^|]*)\|\s*$", line)
        if match is None:
            continue
        column = re.sub(r"\([^)]*\)", "", match[2]).replace("`", "")
        names = [name.strip().removeprefix("rca.") for name in column.split(",")]
        rows[match[1]] = [name for name in names if name and name != NOTHING]
    return rows


def differences(documented: dict[str, list[str]], imported: dict[str, set[str]]) -> list[str]:
    """What the table gets wrong, a line per room."""
    problems = []
    for room in sorted(imported.keys() - documented.keys()):
        problems.append(
            f"rca.{room}: no row in the table (it imports {', '.join(sorted(imported[room])) or 'nothing'})"
        )
    for room in sorted(documented.keys() - imported.keys()):
        problems.append(f"rca.{room}: a row for a room the package does not have")
    for room in sorted(documented.keys() & imported.keys()):
        named = {name for name in documented[room] if name in imported}
        libraries = [name for name in documented[room] if name not in imported]
        missing, extra = sorted(imported[room] - named), sorted(named - imported[room])
        unknown = [
            name for name in libraries if not re.fullmatch(r"\w+", name) or importlib.util.find_spec(name) is None
        ]
        if missing:
            problems.append(f"rca.{room}: imports {', '.join(missing)}, which the table does not name")
        if extra:
            problems.append(f"rca.{room}: the table names {', '.join(extra)}, which it does not import")
        if unknown:
            problems.append(f"rca.{room}: the table names {', '.join(unknown)}, neither a room nor a library")
    return problems


def test_the_dependency_table_names_exactly_what_each_room_imports() -> None:
    problems = differences(documented_rooms(ARCHITECTURE.read_text()), imported_rooms())
    assert not problems, "docs/architecture.md's table differs from the imports:\n" + "\n".join(problems)


def test_the_check_reads_notes_and_names_each_room_that_differs() -> None:
    """The check itself, on a table of its own: notes and libraries pass, and each room whose column
    misses an import or names one it lacks is named, with what differs."""
    table = "\n".join(
        [
            "| Room | Holds | Depends on |",
            "|---|---|---|",
            "| `rca.domain` | nouns | nothing of `rca` |",
            "| `rca.config` | settings | pydantic, nothing of `rca` |",
            "| `rca.store` | tables | `rca.domain` |",
            "| `rca.notify` | Slack | incidents (the notices owed), store, config (a, b) |",
            "| `rca.ghost` | nothing | domain, nosuchlibraryanywhere |",
        ]
    )
    imported = {
        "domain": set(),
        "config": set(),
        "store": {"domain"},
        "notify": {"incidents", "store", "domain"},
        "incidents": {"store"},
    }
    documented = documented_rooms(table)
    assert documented["notify"] == ["incidents", "store", "config"]
    assert documented["domain"] == [] and documented["config"] == ["pydantic"]
    assert differences(documented, imported) == [
        "rca.incidents: no row in the table (it imports store)",
        "rca.ghost: a row for a room the package does not have",
        "rca.notify: imports domain, which the table does not name",
        "rca.notify: the table names config, which it does not import",
    ]
    imported = {"domain": set(), "config": {"domain"}, "store": {"domain"}}
    documented = {"domain": [], "config": ["pydantic"], "store": ["domain", "nosuchlibraryanywhere"]}
    assert differences(documented, imported) == [
        "rca.config: imports domain, which the table does not name",
        "rca.store: the table names nosuchlibraryanywhere, neither a room nor a library",
    ]
