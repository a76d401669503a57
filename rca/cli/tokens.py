"""`rca token create|revoke`: named API tokens; only their hashes are stored."""

from __future__ import annotations

import argparse
import sys

from rca.cli.checks import prepare_database
from rca.cli.common import Command, HelpFormatter, fail
from rca.config import Settings


def add_parser(command: Command) -> None:
    token = command(
        "token",
        "create or revoke a named API token (read or write scope)",
        "Manage named API tokens in the database; only their hashes are stored.",
    )
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, help=help_, description=description, formatter_class=HelpFormatter)

    create = action("create", "print a new token; only its hash is stored", "Create a token and print it once.")
    create.add_argument("--name", required=True, help="who or what uses it; recorded as the author of feedback")
    create.add_argument(
        "--scope",
        choices=["read", "write"],
        default="read",
        help="read: search and statistics; write: also feedback and investigating again",
    )
    revoke = action("revoke", "stop a token from working", "Revoke a live token by name.")
    revoke.add_argument("--name", required=True, help="the token's name, as given to create")
    token.set_defaults(func=run)


def run(settings: Settings, args: argparse.Namespace) -> None:
    """Create or revoke a named API token; a new token is printed once and only its hash is kept."""
    from rca.store import tokens
    from rca.store.db import session_scope

    prepare_database(settings)
    url = settings.effective_database_url
    name = args.name.strip()  # the same name for create and revoke
    if args.action == "create":
        if not name or len(name) > 128:
            fail("--name: give 1 to 128 characters")
        try:
            with session_scope(url) as session:
                token = tokens.create(session, name, args.scope)
        except ValueError as exc:
            fail(str(exc))
        print(token)
        print(f"token {name!r} ({args.scope}) created; it is shown only now", file=sys.stderr)
    else:
        with session_scope(url) as session:
            revoked = tokens.revoke(session, name)
        if not revoked:
            fail(f"no live token named {name!r}")
        print(f"token {name!r} revoked")
