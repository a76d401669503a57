"""`rca gpu-probe`: this host's NVML GPU metrics (GPM included) for Prometheus."""

from __future__ import annotations

import argparse
import sys

from rca.cli.common import EXIT_NO_DATA, Command, fail
from rca.config import Settings


def add_parser(command: Command) -> None:
    gpu = command(
        "gpu-probe",
        "serve this host's NVML GPU metrics (GPM included) for Prometheus",
        "Sample NVML on this GPU host and serve it as Prometheus metrics (GPM counters included, "
        "which no standard exporter publishes). Exits 3 without an NVIDIA GPU.",
    )
    gpu.add_argument("--host", default="127.0.0.1", help="listen address")
    gpu.add_argument("--port", type=int, default=9835, help="listen port")
    gpu.add_argument("--interval", type=float, default=5.0, help="seconds between NVML samples")
    gpu.add_argument("--once", action="store_true", help="print one sample as Prometheus text and exit")
    gpu.set_defaults(func=run)


def run(settings: Settings, args: argparse.Namespace) -> None:
    """Sample NVML on this GPU host and serve it as Prometheus metrics: no standard exporter publishes GPM."""
    from rca.gpu.exporter import run_once, serve
    from rca.gpu.nvml import NoGpuError

    if args.interval <= 0 or not 0 <= args.port <= 65535:
        fail("--interval must be > 0 and --port within 0-65535")
    try:
        if args.once:
            run_once(sys.stdout)
        else:
            serve(args.host, args.port, args.interval)
    except NoGpuError as exc:
        fail(f"no NVIDIA GPU available: {exc}", code=EXIT_NO_DATA)
    except OSError as exc:
        if args.once:  # the sample could not be written out: a closed pipe (`| head`), a full disk
            fail(f"cannot write the sample: {exc.strerror or exc}")
        fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
