"""The query layer's own refusals, without a database: a page's form read into a search, and the
problems a QueryError carries (the API's and the pages' behaviour: tests/api/test_search.py,
tests/pages/test_routes.py)."""

from __future__ import annotations

import pytest

from rca.queries.errors import QueryError
from rca.queries.incidents import ORIGINS, search_of_form


def test_a_form_becomes_a_search_with_blank_fields_unset() -> None:
    asked = search_of_form(
        {"q": "disk", "status": "firing", "label": "job=vllm", "signal": None, "confirmed": "no"},
        limit=25,
        cursor=None,
    )
    assert (asked.q, asked.status, asked.labels, asked.signals, asked.confirmed) == (
        "disk",
        "firing",
        ["job=vllm"],
        [],
        False,
    )
    assert (asked.limit, asked.cursor, asked.sort, asked.total) == (25, None, None, False)


def test_every_value_outside_its_choices_is_said_at_once_in_the_forms_order() -> None:
    with pytest.raises(QueryError) as refused:
        search_of_form({"status": "open", "confirmed": "maybe", "origin": "cron"}, limit=25, cursor=None)
    assert [p.parameter for p in refused.value.problems] == ["status", "confirmed", "origin"]
    assert refused.value.messages == [
        "status must be firing or resolved",
        "confirmed must be yes or no",
        f"origin must be {', '.join(ORIGINS[:-1])} or {ORIGINS[-1]}",
    ]
    assert str(refused.value) == "; ".join(refused.value.messages)
