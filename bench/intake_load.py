"""What the intake benches share: a throwaway service to load, an open-loop load generator, and
the CPU each process spends.

`service()` creates a fresh PostgreSQL database (dropped afterwards), starts a private
`redis-server` on a free port as the broker (no `rca worker` consumes it: investigations queue up,
as during a storm), and the real `rca serve` on both. `drive()` sends webhooks at a fixed rate from
several client processes, each an asyncio loop speaking plain HTTP/1.1 over keep-alive sockets
(cheaper than an HTTP library, so that the client is not what saturates); a request's latency is
counted from the moment it was due, not from when a connection was free, so a server that falls
behind shows it (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.store.db import get_engine, migrate  # noqa: E402
from tests.helpers.payloads import make_alert, make_payload  # noqa: E402
from tests.helpers.processes import child_pids, stop_process, wait_until_serving  # noqa: E402

ADMIN_DSN = os.environ.get("BENCH_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
WEBHOOK_PATH = "/api/v1/alertmanager"
TICK = os.sysconf("SC_CLK_TCK")
REQUEST_TIMEOUT = 30.0
IDLE_REUSE_SECONDS = 2.0  # uvicorn closes a keep-alive connection idle for 5 s


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A running `rca serve` and what it stands on."""

    base_port: int
    token: str
    server: subprocess.Popen[bytes]
    redis: subprocess.Popen[bytes]
    dsn: str
    database: str
    log: Path

    def server_pids(self) -> list[int]:
        """The server and every process under it (uvicorn's worker processes)."""
        found, todo = [], [self.server.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += child_pids(pid)
        return found

    def postgres_pids(self) -> list[int]:
        """The Postgres backends connected to the bench's database."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)).fetchall()
        return [int(row[0]) for row in rows]


@contextmanager
def service(workers: int | None, run_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[Service]:
    """A fresh database and Redis and `rca serve --workers N` on them; all removed afterwards."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # `timeout` or a kill sends SIGTERM: unwind, so that the database, Redis and the server go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    database = f"rca_intake_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{database}"
    url = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        migrate(url)
        get_engine(url).dispose()
        port, token = free_port(), secrets.token_urlsafe(16)
        env = (
            {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
            | {
                "RCA_DATABASE_URL": url,
                "RCA_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
                "RCA_WEBHOOK_TOKEN": token,
                "RCA_API_TOKENS": secrets.token_urlsafe(16),
                "RCA_LOG_LEVEL": "WARNING",
                "RCA_DATA_DIR": str(run_dir / "data"),
            }
            | (extra_env or {})
        )
        log = run_dir / "server.log"
        command = [str(REPO / ".venv" / "bin" / "rca"), "serve", "--port", str(port)]
        if workers is not None:
            command += ["--workers", str(workers)]
        with log.open("wb") as sink:
            server = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        wait_until_serving(f"http://127.0.0.1:{port}", server)
        yield Service(port, token, server, redis, dsn, database, log)
    finally:
        if server is not None:
            stop_process(server)
        stop_process(redis)
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


# -- the webhooks ---------------------------------------------------------------------------------


def distinct_group(tag: str, index: int) -> bytes:
    """A notification of a group never seen before: a new incident and a new investigation."""
    alert = make_alert(f"fp-{tag}-{index}", instance=f"gpu-node-{index % 500}:8000")
    return json.dumps(
        make_payload(f'{{}}:{{alertname="QueueHigh",run="{tag}",group="{index}"}}', alerts=[alert])
    ).encode()


def resent_group(tag: str, index: int, *, status: str = "firing") -> bytes:
    """A notification of one of a fixed set of groups, as Alertmanager re-sends every repeat_interval."""
    alert = make_alert(f"fp-{tag}-{index}", status=status, instance=f"gpu-node-{index % 500}:8000")
    return json.dumps(
        make_payload(f'{{}}:{{alertname="QueueHigh",resend="{tag}",group="{index}"}}', alerts=[alert])
    ).encode()


def request_bytes(port: int, token: str, body: bytes) -> bytes:
    head = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# -- the load generator ---------------------------------------------------------------------------


@dataclass
class Tally:
    """What one client process saw."""

    latencies: list[float] = field(default_factory=list)  # seconds, answered 200
    statuses: dict[str, int] = field(default_factory=dict)  # every other answer or failure, by kind
    cpu_seconds: float = 0.0
    last_answer: float = 0.0  # monotonic

    def add(self, other: Tally) -> None:
        self.latencies += other.latencies
        for kind, count in other.statuses.items():
            self.statuses[kind] = self.statuses.get(kind, 0) + count
        self.cpu_seconds += other.cpu_seconds
        self.last_answer = max(self.last_answer, other.last_answer)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _drive(port: int, requests: list[bytes], rate: float, start: float) -> Tally:
    """Send `requests[i]` at `start + i / rate` (monotonic), each on an idle keep-alive connection
    or a new one."""
    tally = Tally()
    idle: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while idle:
            used, reader, writer = idle.pop()
            if time.monotonic() - used < IDLE_REUSE_SECONDS:
                return reader, writer
            writer.close()  # the server may be closing it right now: a new one costs less than that race
        return await asyncio.open_connection("127.0.0.1", port)

    async def one(due: float, request: bytes) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        reader = writer = None
        try:
            reader, writer = await connection()
            status = await asyncio.wait_for(_exchange(reader, writer, request), REQUEST_TIMEOUT)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            tally.statuses[type(exc).__name__] = tally.statuses.get(type(exc).__name__, 0) + 1
            if writer is not None:
                writer.close()
            return
        now = time.monotonic()
        tally.last_answer = max(tally.last_answer, now)
        idle.append((now, reader, writer))
        if status == 200:
            tally.latencies.append(now - due)
        else:
            tally.statuses[str(status)] = tally.statuses.get(str(status), 0) + 1

    await asyncio.gather(*(one(start + i / rate, request) for i, request in enumerate(requests)))
    for _, _, writer in idle:
        writer.close()
    return tally


def _client(port: int, requests: list[bytes], rate: float, start: float, out: Any) -> None:
    cpu = time.process_time()
    tally = asyncio.run(_drive(port, requests, rate, start))
    tally.cpu_seconds = time.process_time() - cpu
    out.put(tally)


def drive(port: int, requests: list[list[bytes]], rate: float) -> tuple[Tally, float]:
    """Send each client's share of the requests at `rate` in all, interleaved; the tally of every
    client and the seconds from the first request due to the last answer."""
    clients = len(requests)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    start = time.monotonic() + 0.5  # every client process is up by then
    processes = [
        context.Process(target=_client, args=(port, share, rate / clients, start + n / rate, out))
        for n, share in enumerate(requests)
    ]
    for process in processes:
        process.start()
    total = Tally()
    for _ in processes:
        total.add(out.get())
    for process in processes:
        process.join()
    return total, (total.last_answer or time.monotonic()) - start


def split(items: list[bytes], clients: int) -> list[list[bytes]]:
    """Deal `items` round-robin to the client processes: together they keep the order."""
    return [items[n::clients] for n in range(clients)]


# -- CPU and memory -------------------------------------------------------------------------------


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User plus system CPU seconds each process has used so far (those that still exist)."""
    found: dict[int, float] = {}
    for pid in pids:
        with suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two samples, by processes alive at the second."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with suppress(OSError, KeyError):
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            total += int(fields["VmRSS"].split()[0])
    return total / 1024


def machine_busy() -> Callable[[], float]:
    """A stopwatch of the whole machine's busy share since it was made (0 to 1, all cores)."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(values), values[3] + values[4]  # idle + iowait

    total0, idle0 = sample()

    def busy() -> float:
        total, idle = sample()
        return 1 - (idle - idle0) / max(1, total - total0)

    return busy


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def count_rows(dsn: str) -> dict[str, int]:
    tables = ("incidents", "alerts", "notifications", "investigations")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in tables)).fetchone()
    assert row is not None
    return dict(zip(tables, row, strict=True))
