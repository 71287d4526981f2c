"""`python -m tessera`: the same as the `tessera` command."""

import sys

from .cli import main

sys.exit(main())
