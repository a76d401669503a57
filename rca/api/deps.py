"""Per-request dependencies of the API handlers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from rca.store.db import session_scope


def _database_session(request: Request) -> Iterator[Session]:
    """The request's one transaction on the configured database."""
    with session_scope(request.app.state.settings.effective_database_url) as session:
        yield session


# `scope="function"`: the transaction commits when the handler returns, before the response is
# sent, so a write the database refuses is answered as an error, never as a 201 that was lost.
DatabaseSession = Annotated[Session, Depends(_database_session, scope="function")]
