"""The `rca` command: one module per command (`serve`, `worker`, `beat`, `migrate`, `investigate`,
`investigate_again`, `backtest`, `demo`, `gpu_probe`, `tokens`), each with its flags and its run;
beside them what several share: the parser (`parser`), exit codes and the one-line error
(`common`), logging (`logs`), start-up checks (`checks`), multiprocess metrics (`multiprocess`),
the worker's process supervisor (`supervisor`) and the demo's HTTP client (`demo_client`)."""

from __future__ import annotations

import os
import sys

from rca.cli.common import EXIT_FAILED, EXIT_NO_DATA, EXIT_OK, EXIT_USAGE, fail
from rca.cli.logs import setup_logging
from rca.cli.parser import build_parser
from rca.config import ConfigError
from rca.startup import checked_settings

__all__ = ["EXIT_FAILED", "EXIT_NO_DATA", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        settings = checked_settings()
    except ConfigError as exc:
        fail(str(exc))
    setup_logging(settings)
    try:
        args.func(settings, args)
    except ConfigError as exc:
        fail(str(exc))
    except BrokenPipeError:  # `rca demo | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_FAILED) from None
