"""A lock that one process of the whole deployment holds at a time, released by the database
when that process dies: the scheduler's (rca/jobs/beat.py), so that however many `rca worker`s
run, one sweeps.

On PostgreSQL it is a session advisory lock on a connection of its own: kill -9, a lost machine
or a dropped connection end the session, and PostgreSQL releases the lock with it. On SQLite
(one machine) it is an exclusive `flock` on a file beside the database, which the kernel
releases when the process exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import zlib
from pathlib import Path
from typing import IO

from sqlalchemy import Connection, make_url, text

from rca.store.db import get_engine


class SingletonLock:
    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        # pg_try_advisory_lock(int, int): this service's namespace, then the lock's name.
        self._keys = {"space": zlib.crc32(b"rca") & 0x7FFFFFFF, "key": zlib.crc32(name.encode()) & 0x7FFFFFFF}
        self._conn: Connection | None = None
        self._file: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None or self._file is not None

    def acquire(self) -> bool:
        """Try once, without waiting. True while this process holds the lock; False when another
        does, or when a connection that held it broke (the lock went with it: try again)."""
        if self.url.startswith("sqlite"):
            return self._flock()
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:
                self.release()
                return False
        conn = get_engine(self.url).connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = bool(conn.scalar(text("SELECT pg_try_advisory_lock(:space, :key)"), self._keys))
        except Exception:
            conn.close()
            raise
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    def _flock(self) -> bool:
        if self._file is not None:
            return True
        database = make_url(self.url).database or "rca.db"
        path = Path(database).with_name(f"{Path(database).name}.{self.name}.lock")
        handle = path.open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        return True

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.execute(text("SELECT pg_advisory_unlock(:space, :key)"), self._keys)
            with contextlib.suppress(Exception):
                self._conn.invalidate()  # a broken session must not go back to the pool
                self._conn.close()
            self._conn = None
        if self._file is not None:
            self._file.close()
            self._file = None
