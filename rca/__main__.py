"""`python -m rca`: the `rca` command (rca worker starts its consumers and scheduler this way)."""

from rca.cli import main

main()
