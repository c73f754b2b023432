"""`python -m kiqbeat`: the same as the `kiqbeat` command."""

import sys

from kiqbeat.entrypoints.cli import main

sys.exit(main())
