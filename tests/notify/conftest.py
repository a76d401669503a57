"""The fake Slack the notify tests post to, checked for Block Kit's limits after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.slack import FakeSlack


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake
    assert fake.problems == [], "a payload broke Block Kit's limits"
