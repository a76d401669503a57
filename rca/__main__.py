"""`python -m rca`: the `rca` command (rca worker starts its consumers and scheduler this way)."""

from rca.cli import main

if __name__ == "__main__":
    main()
