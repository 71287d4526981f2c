"""`python -m tessera`: the same as the `tessera` command."""

from .cli import run

run()
