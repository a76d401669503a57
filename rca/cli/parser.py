"""The `rca` command line's parser: the top level here, each command's flags in its own module."""

from __future__ import annotations

import argparse
import textwrap
from typing import NoReturn

from rca.cli import (
    backtest,
    beat,
    demo,
    gpu_probe,
    investigate,
    investigate_again,
    migrate,
    serve,
    tokens,
    worker,
)
from rca.cli.common import EXIT_CODES, EXIT_USAGE, HelpFormatter

DESCRIPTION = (
    "rca: root-cause analysis for LLM-serving incidents (Alertmanager webhook -> Prometheus evidence -> ranked causes)."
)
# In the order `rca --help` lists them.
COMMANDS = (serve, worker, beat, migrate, investigate, investigate_again, backtest, demo, gpu_probe, tokens)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-serving-rca")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, as every other error of `rca` (exit 2), naming the help to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rca",
        description=textwrap.fill(DESCRIPTION, 79),
        formatter_class=HelpFormatter,
        epilog="Settings come from RCA_* environment variables (see docs/configuration.md).\n\n" + EXIT_CODES,
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_,
            description=textwrap.fill(description, 79),
            formatter_class=HelpFormatter,
            epilog=EXIT_CODES,
        )

    for module in COMMANDS:
        module.add_parser(command)
    return parser
