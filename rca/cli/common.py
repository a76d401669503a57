"""What every command shares: the exit codes, the one-line error, and the help's layout."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_DATA = 0, 1, 2, 3
EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done (for investigate and demo: a diagnosis was made)
  {EXIT_FAILED}  the command failed while running (the demo's investigation failed; backtest:
     Prometheus unreachable, or not a Prometheus; investigate-again: no such
     incident)
  {EXIT_USAGE}  usage or configuration error (bad option, bad RCA_* setting, database unreachable or
     not migrated, port in use)
  {EXIT_NO_DATA}  no data: nothing could be measured (no or unreachable Prometheus, no series for
     the target; backtest: no serving instance in the history; gpu-probe: no NVIDIA GPU), so no cause
     was ranked"""

# A command's sub-parser, made by the top-level parser: name, one-line help, description.
Command = Callable[[str, str, str], argparse.ArgumentParser]


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (unless it is unset or the help already says it), and keeps
    the epilog's line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = not (default is None or default is False or default is argparse.SUPPRESS or isinstance(default, list))
        if shown and "default" not in text and (action.option_strings or action.nargs in ("?", "*")):
            text += " (default: %(default)s)"
        return text
