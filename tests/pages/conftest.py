"""The page tests' site client, on a database of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.pages.site import site


@pytest.fixture
def client(pg_db: str, tmp_path: Path) -> Iterator[TestClient]:
    with site(pg_db, tmp_path) as client:
        yield client
