"""`python -m rca.cli`: the `rca` command, as `python -m rca`."""

from rca.cli import main

if __name__ == "__main__":
    main()
