"""Why a query cannot be answered, as data: the parameter at fault, what is wrong with it, and a
machine-readable kind (the API's 422 `type`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One parameter at fault."""

    parameter: str  # as the API names it: `q`, `cursor`, `until`, ...
    message: str  # for a person
    kind: str  # for a program, e.g. invalid_cursor


class QueryError(ValueError):
    """A query refused, with every problem found (at least one)."""

    def __init__(self, *problems: Problem) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems

    @classmethod
    def of(cls, parameter: str, message: str, kind: str) -> QueryError:
        return cls(Problem(parameter, message, kind))

    @property
    def messages(self) -> list[str]:
        return [p.message for p in self.problems]
