"""`python -m honing` runs the `honing` command line."""

from honing.cli import main

main()
